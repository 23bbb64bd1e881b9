"""Rate limits through the whole stack: a burst from one team is admitted within one
request's worth of its limits and refused with OpenAI's 429 (Retry-After, x-ratelimit-*),
which the official SDK waits for and retries; another team goes on; each key may have its
own; quotas and rate limits together let no burst through; refusals have usage rows."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.policy.model import hash_key
from tests.fake_upstream import FakeUpstream
from tests.server.test_proxy_e2e import usage_rows

KEYS = {"a1": "cp-team-a-one", "a2": "cp-team-a-two", "b": "cp-team-b"}
CHAT = {"model": "gpt-4o", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}


def teams(policies_dir: Path, limits: str, quotas: str = "") -> None:
    (policies_dir / "default.yaml").write_text("metrics: public\n")
    a = f'["{hash_key(KEYS["a1"])}", {{hash: "{hash_key(KEYS["a2"])}", label: ci}}]'
    (policies_dir / "a.yaml").write_text(f"team: a\nkeys: {a}\nrate_limits: {limits}\n{quotas}")
    (policies_dir / "b.yaml").write_text(f'team: b\nkeys: ["{hash_key(KEYS["b"])}"]\n')


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {KEYS[key]}"}


def burst(proxy: Any, keys: list[str], body: dict[str, Any] = CHAT) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=300)
        async with httpx.AsyncClient(timeout=60, limits=limits) as http:
            return list(await asyncio.gather(*(
                http.post(proxy.url + "/v1/chat/completions", headers=auth(k), json=body)
                for k in keys
            )))  # fmt: skip

    return asyncio.run(run())


def test_a_burst_of_200_is_admitted_to_the_requests_limit_and_other_teams_go_on(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    teams(policies_dir, "{requests_per_minute: 20}")
    proxy = start_proxy()
    upstream.delay_s = 0.2
    began = time.monotonic()
    answers = burst(proxy, ["a1"] * 200 + ["b"] * 20)
    refilled = int((time.monotonic() - began) / 3)  # a request's worth every 3 s
    mine, others = answers[:200], answers[200:]
    assert 20 <= [a.status_code for a in mine].count(200) <= 20 + refilled
    assert all(a.status_code == 200 for a in others)  # team b has no limit: never refused
    refused = next(a for a in mine if a.status_code == 429)
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    assert 1 <= int(refused.headers["retry-after"]) <= 4  # a request's worth refills in 3 s
    assert int(refused.headers["retry-after-ms"]) > 0
    assert refused.headers["x-ratelimit-limit-requests"] == "20"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    ok = next(a for a in mine if a.status_code == 200)
    assert ok.headers["x-ratelimit-limit-requests"] == "20"
    assert int(ok.headers["x-ratelimit-remaining-requests"]) < 20
    rows = usage_rows(proxy, at_least=220)
    limited = [r for r in rows if r["team"] == "a" and r["status"] == 429]
    assert {r["error"] for r in limited} == {"rate_limit_exceeded"}
    metrics = httpx.get(proxy.url + "/metrics").text
    assert f'rate_limited_total{{limit="requests",team="a"}} {len(limited)}.0' in metrics


def test_tokens_per_minute_hold_the_planned_tokens_and_give_back_the_unused(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    """Each request takes its prompt and its answer limit (~110 tokens); 2,000 a minute:
    a burst of 60 is admitted until the bucket is spent, one request past it at most.
    Booked, each gives back what it did not use (the fake answers in a few tokens)."""
    teams(policies_dir, "{tokens_per_minute: 2000}")
    proxy = start_proxy()
    upstream.delay_s = 0.2
    answers = burst(proxy, ["a1"] * 60)
    admitted = [a for a in answers if a.status_code == 200]
    taken = 2000 - min(int(a.headers["x-ratelimit-remaining-tokens"]) for a in admitted)
    assert 17 <= len(admitted) <= 19, len(admitted)  # 2,000 / ~110, plus one at most
    assert taken <= 2000 + 120
    refused = next(a for a in answers if a.status_code == 429)
    assert refused.json()["error"]["type"] == "tokens"
    usage_rows(proxy, at_least=60)
    after = httpx.post(proxy.url + "/v1/chat/completions", headers=auth("a1"), json=CHAT)
    assert after.status_code == 200  # what the admitted ones did not use came back
    assert int(after.headers["x-ratelimit-remaining-tokens"]) > 1000


def test_each_key_may_have_its_own_limit(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    teams(policies_dir, "{requests_per_minute: 100, key_requests_per_minute: 3}")
    proxy = start_proxy()
    answers = burst(proxy, ["a1"] * 10 + ["a2"] * 10)
    assert [a.status_code for a in answers[:10]].count(200) == 3
    assert [a.status_code for a in answers[10:]].count(200) == 3
    refused = next(a for a in answers if a.status_code == 429)
    assert "key's requests" in refused.json()["error"]["message"]


def test_quotas_and_rate_limits_together_let_no_burst_through(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    teams(
        policies_dir,
        "{requests_per_minute: 50}",
        "quotas: {daily_tokens: 1000, hard_limit: true}\n",
    )
    proxy = start_proxy()
    upstream.mode, upstream.delay_s = "sized_usage", 0.3
    answers = burst(proxy, ["a1"] * 200)
    admitted = [a for a in answers if a.status_code == 200]
    assert 1 <= len(admitted) <= 10  # the quota's holds (~110 each) stop it first
    codes = {a.json()["error"]["code"] for a in answers if a.status_code == 429}
    assert codes <= {"quota_exceeded", "rate_limit_exceeded"}


def test_the_official_sdk_waits_and_retries_a_rate_limited_request(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    """60 a minute: one request's worth refills each second; the SDK reads retry-after-ms."""
    teams(policies_dir, "{requests_per_minute: 60}")
    proxy = start_proxy()
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEYS["a1"], max_retries=3)
    burst(proxy, ["a1"] * 60)  # the bucket spent
    answer = client.chat.completions.create(**CHAT)  # waits about a second, then goes
    assert answer.choices[0].message.content
    strict = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEYS["a1"], max_retries=0)
    burst(proxy, ["a1"] * 60)
    with pytest.raises(openai.RateLimitError):
        strict.chat.completions.create(**CHAT)
