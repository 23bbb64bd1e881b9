"""Teams kept apart and quotas that hold, through the whole stack.

In key mode a team reaches only the routes its policy allows past the planned ones (the
provider account behind a shared upstream key holds every team's stored completions,
responses and files); routes that bill tokens check the quota and are charged what the
upstream reports; a hard quota holds under concurrency; a quota refusal tells clients
not to retry at once; an upstream's impossible usage is not booked.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.policy.model import hash_key
from tests.fake_upstream import FakeUpstream
from tests.server.test_proxy_e2e import usage_rows

KEY = "cp-team-a"
AUTH = {"authorization": f"Bearer {KEY}"}


def keyed(policies_dir: Path, extra: str = "") -> None:
    (policies_dir / "default.yaml").write_text("")
    (policies_dir / "a.yaml").write_text(
        f'team: a\nkeys: ["{hash_key(KEY)}"]\nupstream: {{api_key_env: A_UPSTREAM_KEY}}\n{extra}'
    )


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/chat/completions?limit=100"),
        ("GET", "/v1/chat/completions/chatcmpl-1"),
        ("GET", "/v1/responses/resp_1"),
        ("GET", "/v1/responses/resp_1/input_items"),
        ("GET", "/v1/files"),
        ("GET", "/v1/files/file-1/content"),
        ("DELETE", "/v1/files/file-1"),
        ("POST", "/v1/batches"),
        ("POST", "/v1/completions"),
    ],
)
def test_a_key_reaches_no_route_its_policy_does_not_list(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, method: str, path: str
) -> None:
    keyed(policies_dir)
    proxy = start_proxy()
    r = httpx.request(method, proxy.url + path, headers=AUTH, json={"model": "m"})
    assert r.status_code == 403, r.text
    assert r.json()["error"]["code"] == "route_not_allowed"
    assert not upstream.requests


def test_the_default_routes_and_the_listed_ones_are_forwarded(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    keyed(
        policies_dir, 'passthrough: ["GET /v1/models", "GET /v1/files*", "POST /v1/embeddings"]\n'
    )
    proxy = start_proxy()
    assert httpx.get(proxy.url + "/v1/models", headers=AUTH).status_code == 200
    assert httpx.get(proxy.url + "/v1/files?limit=1", headers=AUTH).status_code == 200
    denied = httpx.delete(proxy.url + "/v1/files/file-1", headers=AUTH)
    assert denied.status_code == 403  # the method is part of the rule
    r = httpx.post(
        proxy.url + "/v1/embeddings",
        headers=AUTH,
        json={"model": "text-embedding-3-small", "input": "word " * 400},
    )
    assert r.status_code == 200
    (row,) = [row for row in usage_rows(proxy) if row["api"] == "embeddings"]
    charged = upstream.requests[-1].body
    assert row["team"] == "a" and row["model"] == "text-embedding-3-small"
    assert row["prompt_tokens"] == len(charged) // 4 and row["usage_source"] == "upstream"


def test_a_spent_quota_holds_on_every_route_that_bills_tokens(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    keyed(policies_dir, "quotas: {daily_tokens: 100, hard_limit: true}\n")
    proxy = start_proxy()
    body = {"model": "text-embedding-3-small", "input": "word " * 400}
    first = httpx.post(proxy.url + "/v1/embeddings", headers=AUTH, json=body)
    assert first.status_code == 200  # charged ~500 tokens: the quota is spent
    usage_rows(proxy, at_least=1)
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    for path, sent in (
        ("/v1/embeddings", body),
        ("/v1/chat/completions", chat),
        ("/v1/chat/completions/", chat),  # the trailing slash is the planned route too
        ("/v1/responses/", {"model": "gpt-4o", "input": "hi"}),
    ):
        r = httpx.post(proxy.url + path, headers=AUTH, json=sent)
        assert r.status_code == 429, (path, r.status_code)
        assert r.json()["error"]["code"] == "quota_exceeded"
        assert r.headers["x-should-retry"] == "false"
        assert 0 < int(r.headers["retry-after"]) <= 86_400
    assert len(upstream.requests) == 1


def test_concurrent_requests_cannot_overshoot_a_hard_quota(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    """60 requests of ~1,000 tokens at once against a 5,000-token hard quota: each holds
    its expected tokens when admitted, so at most the quota plus one request is charged."""
    keyed(policies_dir, "quotas: {daily_tokens: 5000, hard_limit: true}\n")
    proxy = start_proxy()
    upstream.mode, upstream.delay_s = "sized_usage", 0.5
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "lorem " * 800}]}
    statuses = _burst(proxy, body, 60, AUTH)
    assert statuses.count(200) >= 1 and statuses.count(429) >= 50
    rows = usage_rows(proxy, at_least=60)
    charged = [r["total_tokens"] for r in rows if r["status"] == 200]
    assert sum(charged) <= 5000 + max(charged), (sum(charged), len(charged))


def test_impossible_usage_is_not_booked_as_reported(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    """An upstream reporting -1e9 prompt tokens would refund the team's quota: the row is
    estimated instead."""
    keyed(policies_dir, "quotas: {daily_tokens: 100000}\n")
    proxy = start_proxy()
    upstream.mode = "negative_usage"
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi there"}]}
    assert (
        httpx.post(proxy.url + "/v1/chat/completions", headers=AUTH, json=chat).status_code == 200
    )
    (row,) = usage_rows(proxy)
    assert row["usage_source"] == "estimated"
    assert row["prompt_tokens"] > 0 and row["quota_used"] > 0


def test_the_openai_sdk_does_not_retry_a_quota_refusal(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    """Without x-should-retry: false the SDK retried the 429 twice (1.3 s, three usage
    rows for one call)."""
    import openai

    keyed(policies_dir, "quotas: {daily_tokens: 1, hard_limit: true}\n")
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=2)
    sdk.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    usage_rows(proxy, at_least=1)  # 18 tokens charged: the quota of 1 is spent
    with pytest.raises(openai.RateLimitError) as refused:
        sdk.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.code == "quota_exceeded"
    rows = usage_rows(proxy, at_least=3)  # waits out a retry's row, if one came
    assert [r["status"] for r in rows] == [200, 429]  # one row: no retry


def _burst(proxy: Any, body: dict[str, Any], n: int, headers: dict[str, str]) -> list[int]:
    async def run() -> list[int]:
        async with httpx.AsyncClient(timeout=30) as http:
            answers = await asyncio.gather(
                *(
                    http.post(proxy.url + "/v1/chat/completions", headers=headers, json=body)
                    for _ in range(n)
                )
            )
            return [a.status_code for a in answers]

    return asyncio.run(run())


@pytest.mark.parametrize("max_tokens", [None, 900])
def test_holds_cover_the_answer_as_well_as_the_prompt(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, max_tokens: int | None
) -> None:
    """60 small prompts at once whose answers run long (to their max_tokens, or 900 tokens
    when they set none) against a 5,000-token hard quota: each holds its prompt and its
    answer limit (the policy's answer_hold_tokens when it sets none), so at most the quota
    plus one request's worth is charged."""
    hold = "" if max_tokens else ", answer_hold_tokens: 1000"
    keyed(policies_dir, f"quotas: {{daily_tokens: 5000, hard_limit: true{hold}}}\n")
    proxy = start_proxy()
    upstream.mode, upstream.delay_s = "sized_usage", 0.5
    body: dict[str, Any] = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    if max_tokens:
        body["max_tokens"] = max_tokens
    statuses = _burst(proxy, body, 60, {**AUTH, "x-fake-answer-tokens": "900"})
    assert statuses.count(200) >= 2 and statuses.count(429) >= 50
    rows = usage_rows(proxy, at_least=60)
    charged = [r["total_tokens"] for r in rows if r["status"] == 200]
    assert sum(charged) <= 5000 + max(charged), (sum(charged), len(charged))


def test_a_hard_dollar_quota_holds_what_requests_in_flight_may_cost(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    """40 requests at once against a $0.05 hard quota: each holds its prompt at the
    dearest input rate and its max_tokens at the output rate, so the team is charged at
    most the quota and one request's worth."""
    keyed(policies_dir, "quotas: {daily_usd: 0.05, hard_limit: true}\n")
    proxy = start_proxy()
    upstream.mode, upstream.delay_s = "sized_usage", 0.5
    body = {"model": "gpt-4o", "max_tokens": 2000,
            "messages": [{"role": "user", "content": "lorem " * 800}]}  # fmt: skip
    statuses = _burst(proxy, body, 40, AUTH)
    assert statuses.count(200) >= 1 and statuses.count(429) >= 30
    rows = usage_rows(proxy, at_least=40)
    costs = [r["cost_usd"] for r in rows if r["status"] == 200]
    assert sum(costs) <= 0.05 + max(costs), (sum(costs), len(costs))


def test_a_model_with_no_price_is_refused_under_a_hard_dollar_quota_unless_priced(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    """A name the bundled price map does not know would cost nothing: refused with a
    hard dollar quota, until the policy prices it; then charged at that price."""
    keyed(policies_dir, "quotas: {daily_usd: 1, hard_limit: true}\n")
    proxy = start_proxy()
    body = {"model": "my-private-model", "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(proxy.url + "/v1/chat/completions", headers=AUTH, json=body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "model_not_priced"
    assert not upstream.requests
    keyed(
        policies_dir,
        "quotas: {daily_usd: 1, hard_limit: true}\n"
        "models: {my-private-model: {input_usd_per_mtok: 2, output_usd_per_mtok: 8}}\n",
    )
    proxy = start_proxy()
    upstream.mode = "sized_usage"
    r = httpx.post(proxy.url + "/v1/chat/completions", headers=AUTH, json=body)
    assert r.status_code == 200, r.text
    row = usage_rows(proxy, at_least=2)[-1]
    assert row["cost_usd"] == pytest.approx((row["prompt_tokens"] * 2 + 7 * 8) / 1e6)


@pytest.mark.parametrize(
    "path",
    ["/v1/chat//completions", "//v1/chat/completions", "/v1/chat/completions;x",
     "/v1/Chat/completions", "/V1/CHAT/COMPLETIONS/", "/v1/responses;a=b"],
)  # fmt: skip
def test_no_spelling_of_a_metered_route_passes_a_spent_quota(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, path: str
) -> None:
    (policies_dir / "default.yaml").write_text("quotas: {daily_tokens: 1, hard_limit: true}\n")
    proxy = start_proxy()
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "input": "hi"}
    first = httpx.post(proxy.url + "/v1/chat/completions", json=chat)
    assert first.status_code == 200  # the quota is spent
    r = httpx.post(proxy.url + path, json=chat)
    assert r.status_code == 429, (path, r.status_code, r.text[:200])
    assert len(upstream.requests) == 1
    assert len(usage_rows(proxy, at_least=2)) == 2  # the refusal has its row
