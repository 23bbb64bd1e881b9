"""Body read step: an ASGI message taken at once when it is already there, else awaited."""

from __future__ import annotations

import types
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any

from starlette.types import Message


class Pending:
    """The rest of a coroutine that was stepped once and is waiting on `first`.

    Awaiting it is what `await coro` would have done from that point on: whatever the
    coroutine yields goes to the task (futures pass through untouched), and what the task
    sends or throws (a cancellation) goes back into the coroutine.
    """

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, Message], first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, Any, Message]:
        coro, pending = self._coro, self._first
        while True:
            try:
                sent = yield pending
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # handed on (a cancellation): the coroutine decides
                try:
                    pending = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
            else:
                try:
                    pending = coro.send(sent)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]


def ready_now(awaitable: Awaitable[Message]) -> tuple[Message | None, Awaitable[Message]]:
    """(the message, _) if `awaitable` (a coroutine) completes without waiting, else
    (None, what to await for it).

    A small body usually arrives with its request head: uvicorn has the whole message when
    the handler starts, so the read needs no deadline timer (armed and cancelled per
    request, ~3-4 µs) and no async generator. Only a coroutine can be stepped like this;
    anything else is returned to be awaited as it is.
    """
    if type(awaitable) is not types.CoroutineType:
        return None, awaitable
    coro: Coroutine[Any, Any, Message] = awaitable
    try:
        first = coro.send(None)
    except StopIteration as done:
        return done.value, awaitable
    return None, Pending(coro, first)
