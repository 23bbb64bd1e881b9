"""The chat hot path's body read: a body already there is taken without a deadline timer;
one that has to be waited for keeps its deadline, its size limit and its disconnect."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from unittest import mock

import pytest
from starlette.requests import Request

from proxy.errors import BodyTimeout, BodyTooLarge, InvalidRequest
from proxy.server.pipeline import request_body
from proxy.server.pipeline.ready_now import ready_now

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


def request_of(*messages: dict[str, Any], stall_after: int | None = None) -> Request:
    """A request whose receive() gives `messages` in turn, and waits for ever once
    `stall_after` of them were given."""
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        if stall_after is not None and len(messages) - len(queue) >= stall_after:
            await asyncio.Event().wait()
        return queue.pop(0)

    return Request({"type": "http", "method": "POST", "headers": []}, receive)


def counting_timers(loop: asyncio.AbstractEventLoop) -> list[float]:
    """Patch `loop.call_later` to record each delay it is given."""
    delays: list[float] = []
    original = loop.call_later

    def call_later(delay: float, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        delays.append(delay)
        return original(delay, *args, **kwargs)

    loop.call_later = call_later  # type: ignore[method-assign]
    return delays


def test_a_body_already_received_is_read_without_arming_a_timer() -> None:
    async def main() -> list[float]:
        delays = counting_timers(asyncio.get_running_loop())
        got = await request_body.read_body(
            request_of({"type": "http.request", "body": BODY, "more_body": False}), 1000
        )
        assert got == BODY
        return delays

    assert asyncio.run(main()) == []  # the old read armed (and cancelled) one per request


def test_a_body_in_pieces_is_joined_and_its_size_limit_kept() -> None:
    parts = [
        {"type": "http.request", "body": b'{"model":', "more_body": True},
        {"type": "http.request", "body": b"", "more_body": True},
        {"type": "http.request", "body": b'"m"}', "more_body": False},
    ]

    async def main() -> None:
        assert await request_body.read_body(request_of(*parts), 1000) == b'{"model":"m"}'
        with pytest.raises(BodyTooLarge):
            await request_body.read_body(request_of(*parts), 10)
        one = {"type": "http.request", "body": BODY, "more_body": False}
        with pytest.raises(BodyTooLarge):
            await request_body.read_body(request_of(one), len(BODY) - 1)

    asyncio.run(main())


def test_a_client_gone_before_its_body_is_a_bad_request() -> None:
    async def main() -> None:
        gone = request_of({"type": "http.disconnect"})
        with pytest.raises(InvalidRequest):
            await request_body.read_body(gone, 1000)
        half = request_of(
            {"type": "http.request", "body": b"{", "more_body": True}, {"type": "http.disconnect"}
        )
        with pytest.raises(InvalidRequest):
            await request_body.read_body(half, 1000)

    asyncio.run(main())


@pytest.mark.parametrize("stall_after", [0, 1])
def test_a_body_that_stalls_still_times_out(stall_after: int) -> None:
    parts = [{"type": "http.request", "body": b"{", "more_body": True}]

    async def main() -> None:
        with mock.patch.object(request_body, "BODY_READ_TIMEOUT_S", 0.05):
            began = time.monotonic()
            with pytest.raises(BodyTimeout):
                await request_body.read_body(request_of(*parts, stall_after=stall_after), 1000)
            assert time.monotonic() - began < 2
            assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]

    asyncio.run(main())


def test_a_body_that_arrives_later_is_awaited() -> None:
    """The first receive waits (the body is not there yet): the read still gets it."""

    async def main() -> bytes:
        ready = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await ready.wait()
            return {"type": "http.request", "body": BODY, "more_body": False}

        asyncio.get_running_loop().call_later(0.01, ready.set)
        request = Request({"type": "http", "method": "POST", "headers": []}, receive)
        return await request_body.read_body(request, 1000)

    assert asyncio.run(main()) == BODY


def test_ready_now_passes_a_cancellation_into_the_waiting_coroutine() -> None:
    seen: list[str] = []

    async def receive() -> dict[str, Any]:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return {}

    async def main() -> None:
        got, rest = ready_now(receive())
        assert got is None
        task = asyncio.ensure_future(_await(rest))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == ["cancelled"]


def test_ready_now_leaves_other_awaitables_to_be_awaited() -> None:
    async def main() -> None:
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        future.set_result({"type": "http.request"})
        got, rest = ready_now(future)
        assert got is None and await rest == {"type": "http.request"}

    asyncio.run(main())


async def _await(awaitable: Any) -> Any:
    return await awaitable
