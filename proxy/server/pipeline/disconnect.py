"""Client disconnects while the proxy waits on the upstream: cancel the wait at once."""

from __future__ import annotations

import asyncio
from types import TracebackType

from starlette.requests import Request

LISTEN_AFTER_S = 0.25  # how long the upstream may take before a client leaving is watched for


class DisconnectWatch:
    disconnected = False


class cancel_on_disconnect:  # noqa: N801 - used like the function it replaced: `async with`
    """Cancel the current task if the client goes away inside the block.

    Starlette only notices a disconnect once it writes the answer; a model slow to start
    would keep the upstream request (and its cost) running for nothing until then. Use
    only after the request body has been read: this listens on the same ASGI channel.

    The listener is armed late: most answers come within LISTEN_AFTER_S and never need a
    task (making and cancelling one per request was ~20 µs); a client gone before then is
    noticed as soon as it starts, since the disconnect message waits on the channel. A
    class, not a generator-based context manager: one object per request, no generator.
    """

    __slots__ = ("_listener", "_request", "_task", "_timer", "watch")

    def __init__(self, request: Request) -> None:
        self._request = request
        self.watch = DisconnectWatch()
        self._listener: asyncio.Future[None] | None = None

    async def __aenter__(self) -> DisconnectWatch:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._timer = asyncio.get_running_loop().call_later(LISTEN_AFTER_S, self._start)
        return self.watch

    def _start(self) -> None:
        self._listener = asyncio.ensure_future(self._listen())

    async def _listen(self) -> None:
        while True:
            message = await self._request.receive()
            if message["type"] == "http.disconnect":
                self.watch.disconnected = True
                self._task.cancel()
                return

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._timer.cancel()
        if self._listener is not None:
            self._listener.cancel()
        gone = self.watch.disconnected
        if gone and kind is not None and issubclass(kind, asyncio.CancelledError):
            self._task.uncancel()  # ours, not a shutdown: the caller records it
            raise ClientGone() from None
        return False


class ClientGone(Exception):
    """The client disconnected before its answer started."""
