"""The head deadline on a kept-alive connection: one timer per head_timeout_s, not per request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from proxy.server.app.connection_limits import LimitedProtocol


class FakeHandle:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[FakeHandle] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeHandle:
        handle = FakeHandle(self.now + delay, callback)
        self.timers.append(handle)
        return handle

    def fire_due(self) -> None:
        for handle in list(self.timers):
            if not handle.cancelled and handle.when <= self.now:
                self.timers.remove(handle)
                handle.callback()


@pytest.fixture
def protocol(monkeypatch: pytest.MonkeyPatch) -> tuple[LimitedProtocol, FakeLoop, list[float]]:
    # Only the head timer is under test: uvicorn's own parsing steps are left out.
    monkeypatch.setattr(HttpToolsProtocol, "on_message_begin", lambda self: None)
    monkeypatch.setattr(HttpToolsProtocol, "on_headers_complete", lambda self: None)
    loop = FakeLoop()
    timed_out: list[float] = []
    proto: Any = LimitedProtocol.__new__(LimitedProtocol)
    proto.loop, proto.head_timeout_s = loop, 10.0
    proto._head_timer, proto._head_started = None, None
    proto._head_timed_out = lambda: timed_out.append(loop.now)
    proto._start_head_timer()  # as connection_made does
    return proto, loop, timed_out


def test_many_requests_on_one_connection_arm_one_timer(
    protocol: tuple[LimitedProtocol, FakeLoop, list[float]],
) -> None:
    proto, loop, timed_out = protocol
    proto.on_headers_complete()  # the first head, counted from the connection's start
    for _ in range(100):
        loop.now += 0.001
        proto.on_message_begin()
        proto.on_headers_complete()
    made = len(loop.timers)
    assert made == 1  # was one made and cancelled per request (101 here)
    assert not timed_out


def test_a_head_still_gets_its_full_timeout_and_no_more(
    protocol: tuple[LimitedProtocol, FakeLoop, list[float]],
) -> None:
    proto, loop, timed_out = protocol
    proto.on_headers_complete()
    loop.now = 9.0
    proto.on_message_begin()  # a head begins at 9 s and never completes
    loop.now = 10.0
    loop.fire_due()  # the timer armed at 0 s: this head has 9 s left, re-armed
    assert not timed_out
    loop.now = 18.9
    loop.fire_due()
    assert not timed_out
    loop.now = 19.0
    loop.fire_due()
    assert timed_out == [19.0]


def test_an_idle_connection_disarms_then_rearms(
    protocol: tuple[LimitedProtocol, FakeLoop, list[float]],
) -> None:
    proto, loop, timed_out = protocol
    proto.on_headers_complete()
    loop.now = 10.0
    loop.fire_due()  # nothing awaited: no new timer until the next head begins
    assert not [t for t in loop.timers if not t.cancelled]
    loop.now = 50.0
    proto.on_message_begin()
    loop.now = 60.0
    loop.fire_due()
    assert timed_out == [60.0]
