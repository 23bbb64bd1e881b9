"""Client disconnects while the proxy waits on the upstream: cancel the wait at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from starlette.requests import Request


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

    async def listen() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                watch.disconnected = True
                task.cancel()
                return

    listener = asyncio.ensure_future(listen())
    try:
        yield watch
    except asyncio.CancelledError:
        if not watch.disconnected:
            raise
        task.uncancel()  # ours, not a shutdown: the caller records it and moves on
        raise ClientGone() from None
    finally:
        listener.cancel()


class ClientGone(Exception):
    """The client disconnected before its answer started."""
