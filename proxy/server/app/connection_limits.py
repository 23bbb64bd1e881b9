"""Client connections: a deadline for each request head, a cap on open connections per worker."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from proxy.server.core.settings import Settings

# Sent before closing a connection whose head did not arrive in time (RFC 9110 15.5.9).
_TIMEOUT_ANSWER = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class LimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, plus two limits it lacks.

    uvicorn times out idle keep-alive connections but never a request head sent slowly (or
    not at all): 20,000 half-sent heads hold 20,000 file descriptors for good. Here each
    head has `head_timeout_s` from the moment the connection opens, or the next request on it
    begins; and past `max_connections` open connections a new one is closed at once, so the
    process keeps descriptors for the clients it already serves.
    """

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        head_timeout_s: float = 10.0,
        max_connections: int = 2048,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.head_timeout_s = head_timeout_s
        self.max_connections = max_connections
        self._head_timer: asyncio.TimerHandle | None = None
        # When the head being awaited began (loop time); None while none is awaited.
        self._head_started: float | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.max_connections:
            # Refused before it counts: a reset frees the descriptor now, not after a FIN dance.
            self._refused = True
            self.transport = transport
            transport.abort()
            return
        super().connection_made(transport)
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        if self._refused:
            return
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_started is None:  # a further request on a kept-alive connection
            self._start_head_timer()

    def on_headers_complete(self) -> None:
        # The timer is left armed: on a busy kept-alive connection it is re-armed only when
        # it fires (every head_timeout_s), not made and cancelled for every request (~3 µs).
        self._head_started = None
        super().on_headers_complete()

    def _start_head_timer(self) -> None:
        self._head_started = self.loop.time()
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timer_fired)

    def _stop_head_timer(self) -> None:
        self._head_started = None
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timer_fired(self) -> None:
        self._head_timer = None
        started = self._head_started
        if started is None:  # no head awaited now: the next one arms the timer again
            return
        left = started + self.head_timeout_s - self.loop.time()
        if left > 0:  # a later head than the one this timer was armed for
            self._head_timer = self.loop.call_later(left, self._head_timer_fired)
            return
        self._head_timed_out()

    def _head_timed_out(self) -> None:
        self._head_started = None
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:  # never inside an answer
            self.transport.write(_TIMEOUT_ANSWER)
        self.transport.close()


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The keyword arguments for uvicorn.run (or uvicorn.Config) that apply these limits.

    The protocol is a partial of a module-level class: uvicorn calls it like a class, and
    it pickles by reference, so worker processes (--workers N) get the same limits.
    """
    protocol = functools.partial(
        LimitedProtocol,
        head_timeout_s=settings.head_timeout_s,
        max_connections=settings.max_connections,
    )
    return {"http": protocol, "timeout_keep_alive": settings.idle_timeout_s}
