"""The end of the shutdown's grace: requests still in flight are cut by the proxy itself, a
moment before the server would, so each gets an answer in its API's shape and its row.

On SIGTERM the server stops accepting and waits `graceful_shutdown_s` for requests in
flight; past it uvicorn cancels them and answers a bare 500 (or cuts a stream without a
word) while the process is already closing. The proxy cuts its planned requests
`CUT_AHEAD_S` earlier: a request still waiting on the upstream answers 503 `server_shutdown`
(OpenAI's or Anthropic's error shape; the official SDKs retry it, elsewhere), a stream ends
with its API's error event, and each is booked as the server's doing, in time for the
usage log's last flush.
"""

from __future__ import annotations

import asyncio

from proxy.errors import ProxyError

CUT_AHEAD_S = 1.0  # before the server's own cut: time to write the answers and book them
CUT_MESSAGE = "Task cancelled: the server is shutting down"


class ServerShutdown(ProxyError):
    """503: the server is shutting down and this request's time is up."""

    status = 503
    type = "server_error"
    code = "server_shutdown"

    def headers(self) -> tuple[tuple[bytes, bytes], ...]:
        return ((b"retry-after", b"1"),)


def shutdown_error() -> ServerShutdown:
    return ServerShutdown("The server is shutting down; send the request again.")


class InFlight:
    """The planned requests in flight in this process, cut when the grace period ends."""

    __slots__ = ("_cut", "tasks")

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[object]] = set()
        self._cut: asyncio.TimerHandle | None = None

    def add(self, task: asyncio.Task[object]) -> None:
        self.tasks.add(task)

    def discard(self, task: asyncio.Task[object]) -> None:
        self.tasks.discard(task)

    def cut_after(self, loop: asyncio.AbstractEventLoop, grace_s: float) -> None:
        """Cut what is still in flight `CUT_AHEAD_S` before `grace_s` from now (once)."""
        if self._cut is None:
            self._cut = loop.call_later(max(0.0, grace_s - CUT_AHEAD_S), self.cut)

    def cut(self) -> None:
        for task in list(self.tasks):
            task.cancel(CUT_MESSAGE)


def cut_by_shutdown(stopping: bool) -> bool:
    """Whether the current task, cancelled, was cut by the end of the grace period (the
    proxy's cut or the server's) rather than by a client gone; if so the cancellation is
    taken back, so that the task can still write its answer."""
    task = asyncio.current_task()
    if not stopping or task is None or not task.cancelling():
        return False
    task.uncancel()
    return True
