"""Hot path: request ids without a syscall, pre-encoded x-context headers, a
disconnect listener armed only for slow answers, plain upstream calls without per-read
timers; each keeping what the client sees."""

from __future__ import annotations

import asyncio
import re
import time
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest

from proxy.errors import UpstreamUnreachable
from proxy.policy.model import ThresholdPolicy
from proxy.server.core import responses
from proxy.server.pipeline import disconnect
from proxy.server.pipeline.disconnect import ClientGone, cancel_on_disconnect
from proxy.server.pipeline.exchange import Exchange
from proxy.types import Level
from proxy.upstream import Timeouts, Upstream
from proxy.upstream.headers import relayable_headers


def test_request_ids_are_unique_and_need_no_syscall_each() -> None:
    from proxy.server.core.request_ids import RequestIds

    ids = RequestIds()
    with mock.patch("os.urandom", side_effect=AssertionError("a syscall per request")):
        made = [ids.next() for _ in range(10_000)]
    assert len(set(made)) == len(made)
    assert all(re.fullmatch(r"req_[0-9a-f]{24}", i) for i in made)
    assert RequestIds().next()[:16] != ids.next()[:16]  # another worker: another prefix


def outcome(**kw: Any) -> SimpleNamespace:
    base = {"context_window": 8192, "budget": 6553, "tokens_before": 5000, "tokens_after": 4000}
    return SimpleNamespace(**{**base, "trimmed": 2, **kw})


def test_context_headers_are_bytes_with_the_contract_values() -> None:
    policy = SimpleNamespace(name="research", thresholds=ThresholdPolicy())
    ex = Exchange("req_1", policy=policy, outcome=outcome())  # type: ignore[arg-type]
    assert ex.context_headers() == [
        (b"x-request-id", b"req_1"),
        (b"x-context-policy", b"research"),
        (b"x-context-level", b"normal"),  # 5000 of a 6553 budget: under the 0.8 warning
        (b"x-context-window", b"8192"),
        (b"x-context-budget", b"6553"),
        (b"x-context-tokens-before", b"5000"),
        (b"x-context-tokens-after", b"4000"),
        (b"x-context-trimmed", b"2"),
    ]
    ex.outcome = outcome(tokens_before=6000)
    assert dict(ex.context_headers())[b"x-context-level"] == Level.CRITICAL.value.encode()
    bare = outcome(context_window=None, budget=None)
    unknown = Exchange("r", policy=policy, outcome=bare)  # type: ignore[arg-type]
    got = dict(unknown.context_headers())
    assert (got[b"x-context-window"], got[b"x-context-budget"]) == (b"unknown", b"none")
    assert dict(Exchange("r").context_headers())[b"x-context-policy"] == b"none"


def test_a_policy_name_that_is_not_ascii_is_percent_encoded() -> None:
    policy = SimpleNamespace(name="équipe\r\n", thresholds=ThresholdPolicy())
    got = dict(Exchange("r", policy=policy).context_headers())  # type: ignore[arg-type]
    assert got[b"x-context-policy"] == b"%C3%A9quipe%0D%0A"


def test_pre_encoded_headers_yield_to_the_upstreams_and_keep_their_order() -> None:
    ex = Exchange("req_9", outcome=outcome())  # type: ignore[arg-type]
    upstream = relayable_headers([(b"Content-Type", b"application/json"), (b"X-Request-Id", b"up")])
    answer = responses.plain(200, upstream, b"{}", ex.context_headers())
    names = [k for k, _ in answer.raw_headers]
    assert names[:3] == [b"content-length", b"content-type", b"x-request-id"]
    assert dict(answer.raw_headers)[b"x-request-id"] == b"up"  # as before: the upstream's wins
    assert names.count(b"x-request-id") == 1
    assert b"x-context-trimmed" in names


class Channel:
    """An ASGI receive channel that counts its calls and may say the client left."""

    def __init__(self, gone_after: float | None = None) -> None:
        self.calls = 0
        self.gone_after = gone_after

    async def receive(self) -> dict[str, Any]:
        self.calls += 1
        if self.gone_after is None:
            await asyncio.Event().wait()
        await asyncio.sleep(self.gone_after or 0)
        return {"type": "http.disconnect"}


def test_a_quick_answer_starts_no_disconnect_listener() -> None:
    """Before: every request made (and cancelled) a listener task, ~20 µs each."""
    channel = Channel()

    async def main() -> None:
        for _ in range(20):
            async with cancel_on_disconnect(channel):  # type: ignore[arg-type]
                await asyncio.sleep(0)
        await asyncio.sleep(0.01)

    asyncio.run(main())
    assert channel.calls == 0


def test_a_client_leaving_during_a_slow_answer_still_cancels_it_promptly() -> None:
    channel = Channel(gone_after=0.05)

    async def main() -> float:
        began = time.monotonic()
        with pytest.raises(ClientGone):
            async with cancel_on_disconnect(channel):  # type: ignore[arg-type]
                await asyncio.sleep(10)  # an upstream slow to answer
        return time.monotonic() - began

    took = asyncio.run(main())
    assert channel.calls == 1
    assert took < disconnect.LISTEN_AFTER_S + 1.5


def test_plain_calls_have_no_per_read_timer_streams_keep_theirs() -> None:
    async def main() -> None:
        upstream = Upstream.open()
        try:
            timeouts = Timeouts(30.0, 5.0)
            with mock.patch.object(
                upstream._session, "request", side_effect=ValueError("no network here")
            ) as request:
                for streaming in (False, True):
                    with pytest.raises(UpstreamUnreachable):
                        await upstream.send("POST", "http://x/v1", [], b"{}", timeouts, streaming)
            plain, stream = (call.kwargs["timeout"] for call in request.call_args_list)
            assert (plain.total, plain.sock_connect, plain.sock_read) == (30.0, 5.0, None)
            assert (stream.total, stream.sock_read) == (None, 30.0)
        finally:
            await upstream.close()

    asyncio.run(main())


def test_reading_a_body_enters_no_asyncio_timeout_and_still_times_out() -> None:
    from starlette.requests import Request

    from proxy.errors import BodyTimeout
    from proxy.server.pipeline import request_body

    def request(stall: bool) -> Request:
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if stall and sent:
                await asyncio.Event().wait()
            sent = True
            return {"type": "http.request", "body": b'{"a":1}', "more_body": stall}

        return Request({"type": "http", "method": "POST", "headers": []}, receive)

    async def main() -> None:
        with mock.patch("asyncio.timeout", side_effect=AssertionError("a timeout context")):
            assert await request_body.read_body(request(False), 1000) == b'{"a":1}'
        with mock.patch.object(request_body, "BODY_READ_TIMEOUT_S", 0.05):
            began = time.monotonic()
            with pytest.raises(BodyTimeout):
                await request_body.read_body(request(True), 1000)
            assert time.monotonic() - began < 2
            assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]

    asyncio.run(main())
