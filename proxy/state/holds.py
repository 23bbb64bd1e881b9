"""Holds: what requests in flight reserve against a hard quota across the fleet.

Each admitted request holds its own entry in the team's holds (a Redis hash per team): its
amount, its expiry and its day. The replica renews its live entries from a thread of its own
(renewal.py), so a hold lives as long as its request whatever the event loop is doing, and a
replica that dies lets go of its holds within their lifetime whatever the others do. A
request lets go of its entry when it is booked, in one atomic step that also counts what it
used into the fleet's day and month counters: every replica's next check sees the request
as booked at once, never as neither or both. That step is applied exactly once (a marker per
entry), so it is retried safely until Redis takes it (the entry renewed meanwhile), and a
reserve that Redis applies after the replica stopped waiting is cancelled the same way.
What a release counted is remembered under the fleet's marker it was counted in, until a
sync reads it back: a Redis that comes back empty is handed it again (replicas.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from redis.asyncio import Redis

from proxy.state.counter_keys import (
    DONE_TTL_S,
    HOLD_TTL_S,
    MARKER_KEY,
    PERIOD_MARGIN,
    RESERVE_TIMEOUT_S,
    WRITES_KEY,
    day_end,
    day_key,
    done_key,
    holds_expiry_s,
    holds_key,
    month_end,
    month_key,
    teams_key,
    timestamp,
)
from proxy.state.hold_scripts import REFRESH_SCRIPT, RELEASE_SCRIPT, RESERVE_SCRIPT
from proxy.state.redis_link import FAILURES, Health

log = logging.getLogger("context_proxy.shared_state")


@dataclass(frozen=True, slots=True)
class Release:
    """A request's entry let go, and what it used counted (0: a reserve cancelled)."""

    team: str
    member: str
    used: int
    when: datetime


@dataclass(frozen=True, slots=True)
class Counted:
    """What a release counted in Redis, under the fleet marker Redis had then, and where
    among the fleet's writes (its count, which the syncs' reads are ordered by)."""

    epoch: str
    write: int
    team: str
    day: str
    used: int


@dataclass(frozen=True, slots=True)
class Renewal:
    """One team's live entries, as the renewal script takes them."""

    keys: list[str]
    args: list[str | int]


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
        self._clock, self.health = clock, health
        self._reserve = client.register_script(RESERVE_SCRIPT)
        self._release = client.register_script(RELEASE_SCRIPT)
        self._refresh = client.register_script(REFRESH_SCRIPT)
        # member -> (team, amount): reserved here and not let go in Redis yet. Read by the
        # renewal thread as a copy (one C call under the GIL), written on the event loop.
        self._live: dict[str, tuple[str, int]] = {}
        self._waiting: list[Release] = []  # releases Redis has not taken yet
        self._tasks: dict[asyncio.Task[None], str] = {}  # releases in flight -> team
        self.counted: list[Counted] = []  # counted in Redis, not read back by a sync yet
        self.epoch: str | None = None  # the fleet's marker as this replica's sync knows it
        self.stale: Callable[[], None] = lambda: None  # told when Redis has another marker
        self.renewing = False  # a thread renews the live entries (renewal.py)
        self._ids = itertools.count(1)

    def member(self, request_id: str) -> str:
        return f"{self.replica}|{request_id}"

    def new_epoch(self) -> str:
        """A fleet marker to write if Redis has none (unique: this replica's id and a count)."""
        return f"{self.replica}#{next(self._ids)}"

    async def reserve(
        self, team: str, request_id: str, amount: int, limits: tuple[int | None, int | None]
    ) -> bool | None:
        """Hold `amount` for the request unless the fleet's counts and holds reach a limit:
        True held, False refused; None when Redis did not answer in time, or has not had the
        fleet's counts handed back (the replica's own check stands; the entry, renewed and
        made again if Redis lacks it, is let go when the request ends)."""
        now = self._clock()
        day = now.strftime("%Y-%m-%d")
        member = self.member(request_id)
        keys = [
            day_key(team, day, self.prefix),
            month_key(team, now.strftime("%Y-%m"), self.prefix),
            holds_key(team, self.prefix),
            done_key(member, self.prefix),
            MARKER_KEY,
        ]
        daily, monthly = limits
        args: list[str | int] = [-1 if daily is None else daily, -1 if monthly is None else monthly]
        args += [member, amount, timestamp(now) + self.ttl_s, timestamp(now), day]
        args += [holds_expiry_s(self.ttl_s), self.epoch or ""]
        releasing = [task for task, of in self._tasks.items() if of == team]
        if releasing:  # this replica's own answers let go first: a client's next request
            await asyncio.wait(releasing, timeout=RESERVE_TIMEOUT_S)  # never meets their hold
        self._live[member] = (team, amount)  # renewed from now on, in case Redis makes it late
        try:
            answer = await asyncio.wait_for(self._reserve(keys=keys, args=args), RESERVE_TIMEOUT_S)
        except FAILURES as exc:  # TimeoutError among them
            self.health.failed("quota reserve", exc, 0)
            return None
        except asyncio.CancelledError:  # the request is gone before it knew: let go of it
            self.release(team, request_id, 0)  # (or the entry would be renewed for good)
            raise
        if answer == 2:  # Redis came back without the fleet's counts: until they are back
            self.stale()
            return None
        if not answer:
            self._live.pop(member, None)
        return bool(answer)

    def release(self, team: str, request_id: str, used: int) -> None:
        """Let go of the request's entry and count what it used, now (in the background:
        booking never waits on Redis); retried with every sync until Redis takes it."""
        member = self.member(request_id)
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
                MARKER_KEY,
                WRITES_KEY,
                teams_key(month, self.prefix),
            ]
            ends = (day_end(day) + PERIOD_MARGIN, month_end(month) + PERIOD_MARGIN)
            args: list[str | int] = [job.member, job.used, timestamp(ends[0]), timestamp(ends[1])]
            args += [DONE_TTL_S, self.new_epoch(), job.team]
            try:
                reply = await self._release(keys=keys, args=args)
            except FAILURES as exc:
                self._waiting.extend(jobs[n:])
                self.health.failed("quota release", exc, 0)
                return
            except Exception:  # a bug: logged, the release kept for the next try
                log.exception("shared state: letting a hold go failed")
                self._waiting.extend(jobs[n:])
                return
            self._live.pop(job.member, None)
            epoch, _, write = str(reply[1]).rpartition("|")
            if job.used > 0 and epoch and write.isdigit():  # (an older marker: unknown)
                self.counted.append(Counted(epoch, int(write), job.team, day, job.used))

    @property
    def unsent(self) -> int:
        """Tokens (or millionths) used by requests whose release Redis has not taken."""
        return sum(job.used for job in self._waiting)

    def renewals(self) -> list[Renewal]:
        """The live entries, per team, as the renewal script takes them (any thread)."""
        live = self._live.copy()
        now = self._clock()
        head: list[str | int] = [timestamp(now) + self.ttl_s, now.strftime("%Y-%m-%d")]
        head.append(holds_expiry_s(self.ttl_s))
        by_team: dict[str, Renewal] = {}
        for member, (team, amount) in live.items():
            found = by_team.get(team)
            if found is None:
                found = by_team[team] = Renewal([holds_key(team, self.prefix)], list(head))
            found.keys.append(done_key(member, self.prefix))
            found.args.extend((member, amount))
        return list(by_team.values())

    async def sync(self) -> None:
        """With each sync: the releases Redis has not taken yet, and, unless a thread does it,
        the renewal of this replica's live entries (a dead replica's are not renewed)."""
        waiting, self._waiting = self._waiting, []
        if waiting:
            await self._send(waiting)
        if not self.renewing:
            for renewal in self.renewals():
                await self._refresh(keys=renewal.keys, args=renewal.args)

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
