"""Replicas: quota counters shared through Redis by a background sync, and the summary store.

The request path never waits on Redis but to reserve a hard quota's hold (holds.py). Each
replica counts in its own QuotaBook as an embedded proxy does; every `interval_s` the sync
loop pushes the unsent increments to per-team per-period counters (INCRBY, expiring after
the period ends) and installs the global totals back into the book. A request that held
part of a hard quota in the fleet is counted there when it is booked, at once, as its hold
goes (holds.py): the fleet's next check sees it. A Redis that comes back without the fleet's
marker is handed back what each replica knew and counted (handover.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis

from proxy.state.calibration_share import share_calibration
from proxy.state.counter_keys import (
    HOLD_TTL_S,
    MARKER_KEY,
    PERIOD_MARGIN,
    PREFIX,
    WRITES_KEY,
    day_end,
    day_key,
    month_end,
    month_key,
    restored_prefix,
    teams_key,
)
from proxy.state.handover import APPLY_SCRIPT, counter_args
from proxy.state.holds import FleetHolds
from proxy.state.redis_link import FAILURES, Health, RedisSummaryStore, connect
from proxy.state.renewal import HoldRenewal
from proxy.summaries import SummaryStore, open_store
from proxy.tokens import TokenCounter
from proxy.usage import Metrics, QuotaBook
from proxy.usage.quotas import total_tokens_of

log = logging.getLogger("context_proxy.shared_state")

SYNC_INTERVAL_S = 0.5
MARKER_TTL_S = 7 * 24 * 3600
FINAL_SYNC_S = 3.0  # at shutdown
SPEND_PREFIX = "cp:spend:"  # dollar quotas' counters, in millionths of a dollar


@dataclass(slots=True)
class _Batch:
    seq: int
    tokens: dict[tuple[str, str], int]  # (team, day) -> tokens


class SharedState:
    """Redis-backed quota totals, summary cache and count calibration for one replica."""

    def __init__(
        self,
        client: Redis,
        quotas: QuotaBook,
        metrics: Metrics,
        *,
        interval_s: float = SYNC_INTERVAL_S,
        clock: Callable[[], datetime] | None = None,
        prefix: str = PREFIX,
    ) -> None:
        self.client = client
        self.prefix = prefix  # "cp:quota:" for tokens, "cp:spend:" for millionths of a dollar
        self.quotas = quotas
        self.interval_s = interval_s
        self.health = Health(metrics)
        self._clock = clock or (lambda: datetime.now(UTC))
        self._replica = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._seq = 0
        self._batch: _Batch | None = None  # taken from the book, not yet acknowledged
        # counter key -> (last total read, the fleet's write count then): this period only
        self._seen: dict[str, tuple[int, int]] = {}
        self._lock = asyncio.Lock()
        self._apply = client.register_script(APPLY_SCRIPT)
        self.holds = FleetHolds(client, prefix, self._replica, self._clock, self.health)
        self._wake = asyncio.Event()  # a reserve met a Redis without the fleet's counts
        self.holds.stale = self._wake.set
        self._renewal: HoldRenewal | None = None
        self._summaries = RedisSummaryStore(client, self.health)
        self.counter: TokenCounter | None = None  # set once the services have one
        quotas.share()

    @classmethod
    async def open(
        cls,
        url: str,
        quotas: QuotaBook,
        metrics: Metrics,
        *,
        usage_log: str | None = None,
        interval_s: float = SYNC_INTERVAL_S,
        prefix: str = PREFIX,
        amount: Callable[[dict[str, Any]], int | None] = total_tokens_of,
        hold_ttl_s: int = HOLD_TTL_S,
    ) -> SharedState:
        """Connect and read the shared totals; never raises because Redis is down.

        With Redis up its counters are the truth and the local usage log is not read (it
        holds only this replica's share, already counted there). With Redis down the book
        is rebuilt from `usage_log`, if given, until the first successful sync replaces it.
        A URL that is not a Redis URL raises ValueError.
        """
        state = cls(connect(url), quotas, metrics, interval_s=interval_s, prefix=prefix)
        state.holds.ttl_s = hold_ttl_s
        if not await state.sync() and usage_log and usage_log != "-":
            await asyncio.to_thread(functools.partial(quotas.rebuild, usage_log, amount=amount))
        state._renewal = HoldRenewal(url, [state.holds])
        state._renewal.start()
        return state

    @property
    def healthy(self) -> bool:
        return self.health.up is True

    def summary_store(self) -> RedisSummaryStore:
        return self._summaries

    async def open_summary_store(self, url: str | None) -> SummaryStore:
        """A Summarizer's `store_opener`: the shared store, unless a policy names its own."""
        if url is None:
            return self._summaries
        return await open_store(url)

    async def run(self, stop: asyncio.Event) -> None:
        """Sync every `interval_s` (at once when a reserve met a Redis that lost the fleet's
        counts) until `stop` is set."""
        stopping = asyncio.ensure_future(_set_when(stop, self._wake))
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.interval_s)
                self._wake.clear()
                await self.sync()
        finally:
            stopping.cancel()

    async def aclose(self) -> None:
        """Hand over what is still unsent (if Redis answers soon), then close the pool."""
        await self.holds.aclose(FINAL_SYNC_S)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.sync(), FINAL_SYNC_S)  # an unreachable host: give up
        if self._renewal is not None:  # after the releases: what is still held lapses
            await asyncio.to_thread(self._renewal.stop)
        await self.client.aclose()

    async def sync(self) -> bool:
        """One round: push unsent increments, install global totals. False if Redis failed."""
        async with self._lock:
            try:
                # A batch held back by an outage goes first; what came since follows at once.
                if await self._sync():
                    await self._sync()
            except FAILURES as exc:
                self.health.failed("sync", exc, self._unsent())
                return False
            except Exception:  # a bug here must not end the loop or reach a request
                log.exception("shared state: sync failed")
                self.health.failed("sync", RuntimeError("internal error"), self._unsent())
                return False
            self.health.ok(self._unsent())
            if self.counter is not None:  # a failure here is the calibration's, not quotas'
                try:
                    await share_calibration(self.client, self.counter, self._replica)
                except FAILURES as exc:
                    self.health.failed("count calibration", exc, self._unsent())
                except Exception:
                    log.exception("shared state: sharing the count calibration failed")
            return True

    async def reserve(
        self, team: str, request_id: str, amount: int, limits: tuple[int | None, int | None]
    ) -> bool | None:
        """Hold `amount` for the request in the fleet's holds of `team` (holds.py)."""
        return await self.holds.reserve(team, request_id, amount, limits)

    def release(self, team: str, request_id: str, used: int) -> None:
        """The request's hold let go and what it used counted in the fleet, at once."""
        self.holds.release(team, request_id, used)

    def _unsent(self) -> int:
        held = sum(self._batch.tokens.values()) if self._batch else 0
        return held + self.quotas.unsent() + self.holds.unsent

    async def _sync(self) -> bool:
        """One round trip (two for teams new to us); True if it sent a retried batch only."""
        now = self._clock()
        today, month = now.strftime("%Y-%m-%d"), now.strftime("%Y-%m")
        retried = self._batch is not None
        if not retried:
            await self.holds.sync()
        if self._batch is None:
            taken = self.quotas.take_pending()
            if taken:
                self._seq += 1
                self._batch = _Batch(self._seq, taken)
        batch = self._batch
        counters: dict[str, list[int]] = {}  # key -> [delta, expire-at]
        known = set(self.quotas.teams())  # as of now: teams added during the await wait a round
        for team in known:
            counters[day_key(team, today, self.prefix)] = [0, _ts(day_end(today))]
            counters[month_key(team, month, self.prefix)] = [0, _ts(month_end(month))]
        for (team, day), tokens in (batch.tokens if batch else {}).items():
            for key, end in self._keys(team, day):
                counters.setdefault(key, [0, _ts(end)])[0] += tokens
        counted = self.holds.counted[:]  # releases counted since the last read, to hand over
        handed = []
        for c in counted:
            for key, end in self._keys(c.team, c.day):
                counters.setdefault(key, [0, _ts(end)])
                handed.append((c.epoch, c.write, key, c.used))
        # Every team this replica counts is in the month's set: a Redis that came back empty
        # learns them again, and so does a replica started after (hard-limit teams included,
        # which are counted as their holds go, never in a batch).
        new_teams = sorted(known.union(team for team, _ in batch.tokens) if batch else known)
        args: list[Any] = [batch.seq if batch else 0, MARKER_TTL_S, _ts(month_end(month))]
        args += [self.holds.epoch or "", self.holds.new_epoch(), _ts(month_end(month))]
        args += [restored_prefix(self.prefix), len(new_teams), *new_teams]
        args += counter_args(counters, self._seen, handed)
        keys = [f"{self.prefix}applied:{self._replica}", teams_key(month, self.prefix)]
        keys += [MARKER_KEY, WRITES_KEY]
        reply: list[Any] = await self._apply(keys=[*keys, *counters], args=args)
        self._batch = None  # acknowledged: applied exactly once
        epoch, writes = str(reply[2]), int(reply[3])
        self.holds.epoch = epoch
        # Read back with the totals below: those sent, and those Redis held before the read.
        self.holds.counted = [
            c for c in self.holds.counted[len(counted) :] if c.epoch != epoch or c.write > writes
        ]
        # Floors for the next round: what Redis holds now, our batch included.
        totals = {k: int(v) for k, v in zip(counters, reply[0], strict=True)}
        self._seen = {k: (v, writes) for k, v in totals.items()}
        others = sorted(set(reply[1]) - known)
        if others:  # teams counted only by other replicas so far
            more = [
                k
                for t in others
                for k in (day_key(t, today, self.prefix), month_key(t, month, self.prefix))
            ]
            *values, read_at = await self.client.mget([*more, WRITES_KEY])
            totals.update({k: int(v or 0) for k, v in zip(more, values, strict=True)})
            self._seen.update({k: (totals[k], int(read_at or 0)) for k in more})
        for team in sorted(known.union(others)):
            day_total = totals.get(day_key(team, today, self.prefix), 0)
            month_total = totals.get(month_key(team, month, self.prefix), 0)
            self.quotas.install(team, today, day_total, month_total)
            if self.prefix == PREFIX:  # the gauge holds tokens; spend is not shown there
                self.health.metrics.set_shared_quota(team, day_total, month_total)
        return retried and self.quotas.unsent() > 0

    def _keys(self, team: str, day: str) -> tuple[tuple[str, datetime], tuple[str, datetime]]:
        """A team's counters for `day` and its month, with the ends of their periods."""
        return (
            (day_key(team, day, self.prefix), day_end(day)),
            (month_key(team, day[:7], self.prefix), month_end(day[:7])),
        )


async def _set_when(stop: asyncio.Event, wake: asyncio.Event) -> None:
    await stop.wait()
    wake.set()


def _ts(when: datetime) -> int:
    return int((when + PERIOD_MARGIN).timestamp())
