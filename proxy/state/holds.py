"""Holds: what requests in flight reserve against a hard quota across the fleet.

Each admitted request holds its own entry in the team's holds (a Redis hash per team and
day): its amount, its expiry and its day. A live replica renews its entries with every sync,
so a replica that dies lets go of its holds within HOLD_TTL_S whatever the others do, and no
hold outlives its day. A request lets go of its entry when it is booked, in one atomic step
that also counts what it used into the fleet's day and month counters: every replica's next
check sees the request as booked at once, never as neither or both. That step is applied
exactly once (a marker per entry), so it is retried safely until Redis takes it, and a
reserve that Redis applies after the replica stopped waiting is cancelled the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from redis.asyncio import Redis

from proxy.state.counter_keys import (
    DONE_TTL_S,
    HOLD_TTL_S,
    PERIOD_MARGIN,
    REFRESH_SCRIPT,
    RELEASE_SCRIPT,
    RESERVE_SCRIPT,
    RESERVE_TIMEOUT_S,
    day_end,
    day_key,
    done_key,
    holds_key,
    month_end,
    month_key,
    timestamp,
)
from proxy.state.redis_link import FAILURES, Health

log = logging.getLogger("context_proxy.shared_state")


@dataclass(frozen=True, slots=True)
class Release:
    """A request's entry let go, and what it used counted (0: a reserve cancelled)."""

    team: str
    member: str
    used: int
    when: datetime


class FleetHolds:
    """One replica's holds in the fleet's quota for one counter prefix (tokens or dollars)."""

    def __init__(
        self,
        client: Redis,
        prefix: str,
        replica: str,
        clock: Callable[[], datetime],
        health: Health,
        ttl_s: int = HOLD_TTL_S,
    ) -> None:
        self.prefix, self.replica, self.ttl_s = prefix, replica, ttl_s
        self._clock, self._health = clock, health
        self._reserve = client.register_script(RESERVE_SCRIPT)
        self._release = client.register_script(RELEASE_SCRIPT)
        self._refresh = client.register_script(REFRESH_SCRIPT)
        self._live: dict[str, str] = {}  # member -> team: reserved here, not let go yet
        self._waiting: list[Release] = []  # releases Redis has not taken yet
        self._tasks: dict[asyncio.Task[None], str] = {}  # releases in flight -> team

    def member(self, request_id: str) -> str:
        return f"{self.replica}|{request_id}"

    async def reserve(
        self, team: str, request_id: str, amount: int, limits: tuple[int | None, int | None]
    ) -> bool | None:
        """Hold `amount` for the request unless the fleet's counts and holds reach a limit:
        True held, False refused; None when Redis did not answer in time (the replica's own
        check stands; the entry, if Redis made it late, is cancelled when the request ends)."""
        now = self._clock()
        day = now.strftime("%Y-%m-%d")
        member = self.member(request_id)
        keys = [
            day_key(team, day, self.prefix),
            month_key(team, now.strftime("%Y-%m"), self.prefix),
            holds_key(team, self.prefix),
            done_key(member, self.prefix),
        ]
        daily, monthly = limits
        args: list[str | int] = [-1 if daily is None else daily, -1 if monthly is None else monthly]
        args += [member, amount, timestamp(now) + self.ttl_s, timestamp(now), day]
        args.append(timestamp(day_end(day)))
        releasing = [task for task, of in self._tasks.items() if of == team]
        if releasing:  # this replica's own answers let go first: a client's next request
            await asyncio.wait(releasing, timeout=RESERVE_TIMEOUT_S)  # never meets their hold
        self._live[member] = team  # renewed from now on, in case Redis makes it late
        try:
            answer = await asyncio.wait_for(self._reserve(keys=keys, args=args), RESERVE_TIMEOUT_S)
        except FAILURES as exc:  # TimeoutError among them
            self._health.failed("quota reserve", exc, 0)
            return None
        if not answer:
            self._live.pop(member, None)
        return bool(answer)

    def release(self, team: str, request_id: str, used: int) -> None:
        """Let go of the request's entry and count what it used, now (in the background:
        booking never waits on Redis); retried with every sync until Redis takes it."""
        member = self.member(request_id)
        self._live.pop(member, None)
        job = Release(team, member, max(used, 0), self._clock())
        try:
            task = asyncio.get_running_loop().create_task(self._send([job]))
        except RuntimeError:  # no loop (an embedded caller): with the next sync
            self._waiting.append(job)
            return
        self._tasks[task] = team
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)

    async def _send(self, jobs: list[Release]) -> None:
        for n, job in enumerate(jobs):
            day, month = job.when.strftime("%Y-%m-%d"), job.when.strftime("%Y-%m")
            keys = [
                day_key(job.team, day, self.prefix),
                month_key(job.team, month, self.prefix),
                holds_key(job.team, self.prefix),
                done_key(job.member, self.prefix),
            ]
            ends = (day_end(day) + PERIOD_MARGIN, month_end(month) + PERIOD_MARGIN)
            args: list[str | int] = [job.member, job.used, timestamp(ends[0]), timestamp(ends[1])]
            try:
                await self._release(keys=keys, args=[*args, DONE_TTL_S])
            except FAILURES as exc:
                self._waiting.extend(jobs[n:])
                self._health.failed("quota release", exc, 0)
                return
            except Exception:  # a bug: logged, the release kept for the next try
                log.exception("shared state: letting a hold go failed")
                self._waiting.extend(jobs[n:])
                return

    @property
    def unsent(self) -> int:
        """Tokens (or millionths) used by requests whose release Redis has not taken."""
        return sum(job.used for job in self._waiting)

    async def sync(self) -> None:
        """With each sync: the releases Redis has not taken yet, and the renewal of this
        replica's live entries (a dead replica's are not renewed: they expire)."""
        waiting, self._waiting = self._waiting, []
        if waiting:
            await self._send(waiting)
        if not self._live:
            return
        expires = timestamp(self._clock()) + self.ttl_s
        by_team: dict[str, list[str]] = {}
        for member, team in list(self._live.items()):
            by_team.setdefault(team, []).append(member)
        for team, members in by_team.items():
            await self._refresh(keys=[holds_key(team, self.prefix)], args=[expires, *members])

    async def aclose(self, timeout_s: float) -> None:
        """The releases in flight finished, and those waiting sent (as far as Redis answers
        within `timeout_s`)."""
        with contextlib.suppress(TimeoutError, *FAILURES):
            await asyncio.wait_for(self._drain(), timeout_s)

    async def _drain(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        waiting, self._waiting = self._waiting, []
        if waiting:
            await self._send(waiting)
