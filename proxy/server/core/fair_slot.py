"""The heavy-plan slot, shared fairly: one big plan (or conversion, or count) runs at a
time (plan_step.off_loop says why), and when several teams wait, the slot goes to each in
turn, not to whoever queued most. A team that sends many big bodies at once waits behind
its own, never in front of every other team's one."""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class FairSlot:
    """One holder at a time; waiters served round-robin by team, each team's in order."""

    def __init__(self) -> None:
        self._busy = False
        self._waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    @property
    def waiting(self) -> int:
        return sum(len(queue) for queue in self._waiting.values())

    @asynccontextmanager
    async def hold(self, team: str) -> AsyncIterator[None]:
        if self._busy or self._waiting:
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.setdefault(team, deque()).append(turn)
            try:
                await turn
            except BaseException:
                if turn.done() and not turn.cancelled():
                    self._pass_on()  # the slot was handed over as the waiter went
                else:
                    self._forget(team, turn)
                raise
        else:
            self._busy = True
        try:
            yield
        finally:
            self._pass_on()

    def _pass_on(self) -> None:
        """Hand the slot to the next team in turn (that team goes to the back), or free it."""
        while self._waiting:
            team, queue = next(iter(self._waiting.items()))
            turn = queue.popleft()
            if queue:
                self._waiting.move_to_end(team)
            else:
                del self._waiting[team]
            if not turn.done():
                turn.set_result(None)
                return  # still busy: the slot is the waiter's now
        self._busy = False

    def _forget(self, team: str, turn: asyncio.Future[None]) -> None:
        queue = self._waiting.get(team)
        if queue is not None and turn in queue:
            queue.remove(turn)
            if not queue:
                del self._waiting[team]
