"""Client disconnects while the proxy waits on the upstream: cancel the wait at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from starlette.requests import Request

LISTEN_AFTER_S = 0.25  # how long the upstream may take before a client leaving is watched for


class DisconnectWatch:
    disconnected = False


@contextlib.asynccontextmanager
async def cancel_on_disconnect(request: Request) -> AsyncIterator[DisconnectWatch]:
    """Cancel the current task if the client goes away inside the block.

    Starlette only notices a disconnect once it writes the answer; a model slow to start
    would keep the upstream request (and its cost) running for nothing until then. Use
    only after the request body has been read: this listens on the same ASGI channel.
    """
    watch = DisconnectWatch()
    task = asyncio.current_task()
    assert task is not None
    listener: asyncio.Future[None] | None = None

    async def listen() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                watch.disconnected = True
                task.cancel()
                return

    def start() -> None:
        nonlocal listener
        listener = asyncio.ensure_future(listen())

    # Armed late: most answers come within LISTEN_AFTER_S and never need a listener task
    # (making and cancelling one per request was ~20 µs); a client gone before then is
    # noticed as soon as it starts, since the disconnect message waits on the channel.
    timer = asyncio.get_running_loop().call_later(LISTEN_AFTER_S, start)
    try:
        yield watch
    except asyncio.CancelledError:
        if not watch.disconnected:
            raise
        task.uncancel()  # ours, not a shutdown: the caller records it and moves on
        raise ClientGone() from None
    finally:
        timer.cancel()
        if listener is not None:
            listener.cancel()


class ClientGone(Exception):
    """The client disconnected before its answer started."""
