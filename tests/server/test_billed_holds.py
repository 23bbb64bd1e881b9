"""Every route that bills holds the most it may bill against hard quotas, from its parsed
body: embeddings and legacy completions whatever their framing or key order, every answer
of `n`, in tokens and in dollars; a background response, whose answer the proxy never
reads, refused under a hard quota and charged at its limit otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import RunningProxy
from tests.fake_upstream import FakeUpstream
from tests.server.test_tenancy_and_quotas import AUTH, keyed, usage_rows


def burst(
    proxy: RunningProxy, path: str, body: dict[str, Any], n: int, chunked: bool = False
) -> list[int]:
    raw = orjson.dumps(body)

    async def framed() -> AsyncIterator[bytes]:  # no Content-Length: chunked transfer
        for start in range(0, len(raw), 1000):
            yield raw[start : start + 1000]

    async def run() -> list[int]:
        async with httpx.AsyncClient(timeout=30) as http:
            answers = await asyncio.gather(*(
                http.post(proxy.url + path, headers=AUTH, content=framed() if chunked else raw)
                for _ in range(n)
            ))  # fmt: skip
            return [a.status_code for a in answers]

    return asyncio.run(run())


def charged(proxy: RunningProxy, at_least: int) -> list[int]:
    rows = usage_rows(proxy, at_least=at_least)
    return [r["total_tokens"] for r in rows if r["status"] == 200]


@pytest.mark.parametrize("chunked", [False, True])
def test_embeddings_hold_their_input_whatever_the_framing(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, chunked: bool
) -> None:
    """20 at once, 2,000 tokens each, against a 5,000-token hard quota: without a
    Content-Length a body used to hold nothing (20 of 20 admitted, 20,160 charged)."""
    keyed(policies_dir, "quotas: {daily_tokens: 5000, hard_limit: true}\n")
    proxy = start_proxy()
    upstream.delay_s = 0.5
    body = {"input": "x " * 2000, "model": "text-embedding-3-small"}  # the fake bills 1,000
    statuses = burst(proxy, "/v1/embeddings", body, 20, chunked)
    assert statuses.count(429) >= 10, statuses
    used = charged(proxy, 20)
    assert sum(used) <= 5000 + max(used), used


def test_the_billed_model_is_the_parsed_bodys_whatever_the_key_order(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    """`input` first and a decoy `model` key before the real one: the regex over the first
    4 KB read the decoy or nothing (`cost_usd: null`, 5 of 5 served under a $0.001 hard
    quota). The parsed body's model is priced and held."""
    keyed(policies_dir, "quotas: {daily_usd: 0.001, hard_limit: true}\n")
    proxy = start_proxy()
    upstream.delay_s = 0.3
    body = {"input": ["words " * 3000] * 4, "extra": {"model": "decoy"},
            "model": "text-embedding-ada-002"}  # fmt: skip
    statuses = burst(proxy, "/v1/embeddings", body, 5)
    assert statuses.count(200) < 5, statuses
    rows = usage_rows(proxy, at_least=5)
    served = [r for r in rows if r["status"] == 200]
    assert all(r["model"] == "text-embedding-ada-002" and r["cost_usd"] for r in served)
    spent = sum(r["cost_usd"] for r in served)
    assert spent <= 0.001 + max(r["cost_usd"] for r in served)


def test_an_unpriced_model_is_refused_under_a_hard_dollar_quota(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    keyed(policies_dir, "passthrough: ['POST /v1/*']\nquotas: {daily_usd: 5, hard_limit: true}\n")
    proxy = start_proxy()
    for path, body in (
        ("/v1/embeddings", {"input": "hi", "model": "house-embedder-9"}),
        ("/v1/completions", {"prompt": "hi", "model": "house-completer-9"}),
    ):
        r = httpx.post(proxy.url + path, headers=AUTH, json=body)
        assert r.status_code == 400 and r.json()["error"]["code"] == "model_not_priced", r.text
    assert not upstream.requests


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_the_hold_covers_every_answer_of_n(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, path: str
) -> None:
    """`n: 8, max_tokens: 1000`, 20 at once, 5,000-token hard quota: the hold was one
    answer's (5 admitted, 40,050 charged); it is eight answers' now."""
    extra = "passthrough: ['POST /v1/completions']\n" if path == "/v1/completions" else ""
    keyed(policies_dir, extra + "quotas: {daily_tokens: 5000, hard_limit: true}\n")
    proxy = start_proxy()
    upstream.mode, upstream.delay_s = "sized_usage", 0.5
    if path == "/v1/completions":
        body: dict[str, Any] = {"prompt": "Say hi.", "n": 8, "max_tokens": 1000,
                                "model": "gpt-3.5-turbo-instruct"}  # fmt: skip
    else:
        body = {"model": "gpt-4o", "n": 8, "max_tokens": 1000,
                "messages": [{"role": "user", "content": "Say hi."}]}  # fmt: skip
    statuses = burst(proxy, path, body, 20)
    assert statuses.count(200) == 1, statuses  # one request's answers reach the quota
    used = charged(proxy, 20)
    assert sum(used) <= 5000 + max(used) and max(used) >= 8000, used


def test_a_dollar_hold_covers_every_answer_of_n(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    """gpt-4o answers at $10 per million tokens: 8 answers of 1,000 tokens may cost $0.08,
    past a $0.05 hard quota. One such request is admitted at a time, not five."""
    keyed(policies_dir, "quotas: {daily_usd: 0.05, hard_limit: true}\n")
    proxy = start_proxy()
    upstream.mode, upstream.delay_s = "sized_usage", 0.5
    body = {"model": "gpt-4o", "n": 8, "max_tokens": 1000,
            "messages": [{"role": "user", "content": "Say hi."}]}  # fmt: skip
    statuses = burst(proxy, "/v1/chat/completions", body, 10)
    assert statuses.count(200) == 1, statuses


def test_a_background_response_is_refused_under_a_hard_quota(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    """Its upstream answers "queued" without usage and the answer is read later, past the
    proxy (50,000 output tokens under a 2,000-token quota, 100 charged)."""
    keyed(policies_dir, "quotas: {daily_tokens: 2000, hard_limit: true}\n")
    proxy = start_proxy()
    body = {"model": "gpt-4o", "input": "Write a novel.", "background": True}
    r = httpx.post(proxy.url + "/v1/responses", headers=AUTH, json=body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "background_not_metered"
    assert not upstream.responses_requests
    foreground = {**body, "background": False}
    assert httpx.post(proxy.url + "/v1/responses", headers=AUTH, json=foreground).status_code == 200


def test_a_background_response_is_charged_at_its_answer_limit(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    keyed(policies_dir, "quotas: {daily_tokens: 100000}\n")
    proxy = start_proxy()
    body = {"model": "gpt-4o", "input": "Write a novel.", "background": True,
            "max_output_tokens": 3000}  # fmt: skip
    r = httpx.post(proxy.url + "/v1/responses", headers=AUTH, json=body)
    assert r.status_code == 200 and r.json()["status"] == "queued"
    (row,) = usage_rows(proxy, at_least=1)
    assert row["completion_tokens"] == 3000 and row["usage_source"] == "estimated"
