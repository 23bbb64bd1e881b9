"""Every upstream round of a request that calls `context_recall` is a request to the
upstream like the first: counted for requests and tokens a minute, held against a hard
quota here and in the fleet at the request's own `max_tokens`, and booked from what the
upstream reported even when the client leaves during a later round."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from proxy.policy.model import hash_key
from proxy.state.counter_keys import holds_key
from tests.fake_upstream import FakeUpstream
from tests.server.test_proxy_e2e import usage_rows
from tests.server.test_recall_e2e import WINDOW, chat_history
from tests.state.test_redis_replicas import redis_server, until

__all__ = ["redis_server"]  # the fixture this module uses

KEY = "cp-recall-rounds"
ROUND = 110  # what the fake model reports for each round (100 prompt, 10 completion)


def team(policies_dir: Path, extra: str = "") -> None:
    """A keyed team whose requests are trimmed (relevance off: the early secret is left
    out), so the model calls the proxy's tool."""
    (policies_dir / "default.yaml").write_text(
        f'team: t\nkeys: ["{hash_key(KEY)}"]\n'
        f"models:\n  gpt-4o-mini: {{context_window: {WINDOW}}}\n"
        f"  claude-sonnet-4-6: {{context_window: {WINDOW}}}\n"
        f"history: {{relevance: off}}\n{extra}"
    )


AUTH = {"authorization": f"Bearer {KEY}"}


def body(stream: bool = False, max_tokens: int = 300) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": chat_history(), "stream": stream,
            "max_tokens": max_tokens}  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_gone_during_a_later_round_is_booked_what_the_rounds_before_used(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, stream: bool
) -> None:
    """The round after the recall takes long and the client leaves: round 1 reported 110
    tokens, and the request is booked at them (a plain one used to be booked at 0, a
    streamed one at an estimate of the text the client saw)."""
    team(policies_dir)
    upstream.mode, upstream.later_delay_s = "recall", 5
    proxy = start_proxy()
    with httpx.Client(timeout=httpx.Timeout(30, read=1.5)) as http:
        if stream:
            with http.stream("POST", proxy.url + "/v1/chat/completions", headers=AUTH,
                             json=body(stream=True)) as reply:  # fmt: skip
                seen = ""
                for text in reply.iter_text():
                    seen += text
                    if '" that."' in seen:  # round 1's words are in (a word an event)
                        until(lambda: len(upstream.chat_requests) == 2, "the later round")
                        break  # and the later round is on its way: the client leaves
        else:
            with pytest.raises(httpx.ReadTimeout):
                http.post(proxy.url + "/v1/chat/completions", headers=AUTH, json=body())
    until(lambda: len(upstream.chat_requests) == 2, "the later round sent")
    row = usage_rows(proxy)[-1]
    assert row["status"] == 499 and row["error"] == "client_disconnected"
    assert row["usage_source"] == "upstream"
    assert (row["prompt_tokens"], row["completion_tokens"]) == (100, 10)
    assert row["recall_rounds"] == 1


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_each_api_books_the_rounds_before_a_client_that_left(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, fake_upstream_server: Any,
    api: str,
) -> None:  # fmt: skip
    """The same through the Responses API and Messages (their usage in their own names:
    Anthropic's input and output tokens)."""
    team(policies_dir, f"upstream: {{anthropic: {{base_url: '{fake_upstream_server[1]}'}}}}\n"
                       "recall: {tool: on}\n")  # fmt: skip
    upstream.mode, upstream.later_delay_s = "recall", 5
    proxy = start_proxy()
    said = [{"role": m["role"], "content": m["content"]} for m in chat_history()[1:]]
    if api == "messages":
        path = "/v1/messages"
        sent: dict[str, Any] = {"model": "claude-sonnet-4-6", "max_tokens": 300,
                                "messages": said}  # fmt: skip
    else:
        path, sent = "/v1/responses", {"model": "gpt-4o-mini", "input": said}
    with (
        httpx.Client(timeout=httpx.Timeout(30, read=1.5)) as http,
        pytest.raises(httpx.ReadTimeout),
    ):
        http.post(proxy.url + path, headers=AUTH, json=sent)
    until(lambda: len(upstream.requests) == 2, "the later round sent")
    row = usage_rows(proxy)[-1]
    assert row["status"] == 499 and row["usage_source"] == "upstream"
    assert (row["prompt_tokens"], row["completion_tokens"]) == (100, 10)


def test_each_round_is_a_request_a_minute(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    """Four requests a minute: a request whose answer calls the tool makes two upstream
    requests, so the third such request is refused (each used to count once)."""
    team(policies_dir, "rate_limits: {requests_per_minute: 4}\n")
    upstream.mode = "recall"
    proxy = start_proxy()
    url = proxy.url + "/v1/chat/completions"
    statuses = [httpx.post(url, headers=AUTH, json=body(), timeout=30).status_code
                for _ in range(3)]  # fmt: skip
    assert statuses == [200, 200, 429], statuses
    assert len(upstream.chat_requests) == 4


def test_a_round_past_the_tokens_a_minute_is_refused_and_the_request_booked(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    """The first round takes its prompt and answer limit (~2,030 tokens) from the tokens a
    minute, all there is: the continuation is refused as a request would be, and the
    client told so (never a continuation the bucket did not pay for)."""
    team(policies_dir, "rate_limits: {tokens_per_minute: 2000}\n")
    upstream.mode = "recall"
    proxy = start_proxy()
    reply = httpx.post(
        proxy.url + "/v1/chat/completions", headers=AUTH, json=body(max_tokens=600), timeout=30
    )
    assert reply.status_code == 429, reply.text[:300]
    assert reply.json()["error"]["type"] == "tokens"
    assert len(upstream.chat_requests) == 1
    row = usage_rows(proxy)[-1]
    assert row["status"] == 429 and row["total_tokens"] == ROUND  # round 1, as reported


def test_every_round_is_held_in_the_fleet_at_the_requests_max_tokens(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, redis_server: Any
) -> None:
    """While the continuation waits upstream, the fleet holds both rounds, each at its
    prompt and the request's 300 answer tokens (a round used to be held on its replica
    only, at the default 4,096); once booked, both rounds are counted and nothing held."""
    team(policies_dir, "quotas: {daily_tokens: 1000000, hard_limit: true}\n")
    upstream.mode, upstream.later_delay_s = "recall", 2
    proxy = start_proxy(state=redis_server.url)
    done: list[int] = []
    sender = threading.Thread(target=lambda: done.append(httpx.post(
        proxy.url + "/v1/chat/completions", headers=AUTH, json=body(), timeout=30
    ).status_code))  # fmt: skip
    sender.start()
    with redis.Redis.from_url(redis_server.url, decode_responses=True) as client:
        until(lambda: len(client.hgetall(holds_key("t"))) == 2, "both rounds held in Redis")
        amounts = [int(v.split("|")[0]) for v in client.hgetall(holds_key("t")).values()]
        sender.join(30)
        assert done == [200]
        until(lambda: not client.hgetall(holds_key("t")), "both holds let go")
    assert all(300 < amount < WINDOW + 300 for amount in amounts), amounts
    until(lambda: total(redis_server) == 2 * ROUND, "both rounds counted in the fleet")


def total(server: Any) -> int:
    with redis.Redis.from_url(server.url, decode_responses=True) as client:
        keys = client.keys("cp:quota:t:d:*")
        return sum(int(v) for v in client.mget(keys)) if keys else 0


def test_a_spent_quota_refuses_the_next_round_and_books_the_ones_before(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    """A hard quota that the first round's hold fills (its prompt and 300 answer tokens):
    the continuation is refused as a request would be (429) and round 1 is booked (a
    round's hold used to be checked at 4,096 answer tokens and refused nothing: the
    answer so far went out)."""
    team(policies_dir, "quotas: {daily_tokens: 1800, hard_limit: true}\n")
    upstream.mode = "recall"
    proxy = start_proxy()
    first = httpx.post(proxy.url + "/v1/chat/completions", headers=AUTH, json=body(), timeout=30)
    assert first.status_code == 429, first.text[:300]
    assert first.json()["error"]["code"] == "quota_exceeded"
    assert len(upstream.chat_requests) == 1
    row = usage_rows(proxy)[-1]
    assert row["total_tokens"] == ROUND and row["status"] == 429
