"""Replicas: quota counters shared through Redis by a background sync, and the summary store.

The request path never waits on Redis. Each replica counts in its own QuotaBook as an
embedded proxy does; every `interval_s` the sync loop pushes the unsent increments to
per-team per-period counters (INCRBY, expiring after the period ends) and installs the
global totals back into the book. A hard limit therefore holds across replicas within
about one sync interval of the whole fleet's traffic.
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
from datetime import UTC, datetime, timedelta
from typing import Any

from redis.asyncio import Redis

from proxy.state.calibration_share import share_calibration
from proxy.state.counter_keys import (
    HOLD_TTL_S,
    PREFIX,
    RESERVE_SCRIPT,
    RESERVE_TIMEOUT_S,
    day_end,
    day_key,
    hold_key,
    month_end,
    month_key,
)
from proxy.state.redis_link import FAILURES, Health, RedisSummaryStore, connect
from proxy.summaries import SummaryStore, open_store
from proxy.tokens import TokenCounter
from proxy.usage import Metrics, QuotaBook
from proxy.usage.quotas import total_tokens_of

log = logging.getLogger("context_proxy.shared_state")

SYNC_INTERVAL_S = 0.5
PERIOD_MARGIN = timedelta(days=2)  # counters outlive their period, for late records and skew
MARKER_TTL_S = 7 * 24 * 3600
FINAL_SYNC_S = 3.0  # at shutdown
SPEND_PREFIX = "cp:spend:"  # dollar quotas' counters, in millionths of a dollar

# One atomic step per sync. KEYS: [1] this replica's last applied batch number, [2] the set
# of teams counted this month, [3..] counters. ARGV: batch number, marker TTL, the set's
# expiry, how many teams to add, the teams, then (delta, floor, expire-at) per counter.
# A batch already applied (its reply was lost) is not applied twice. A floor is the last
# total this replica read: if Redis restarted empty, the counter is raised back to it first.
_APPLY = """
local seq = tonumber(ARGV[1])
local done = tonumber(redis.call('GET', KEYS[1]) or '0') >= seq
local nteams = tonumber(ARGV[4])
for i = 1, nteams do redis.call('SADD', KEYS[2], ARGV[4 + i]) end
if nteams > 0 then redis.call('EXPIREAT', KEYS[2], ARGV[3]) end
local base = 4 + nteams
local values = {}
for i = 3, #KEYS do
  local j = base + (i - 3) * 3
  local delta, floor = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
  local cur = tonumber(redis.call('GET', KEYS[i]) or '0')
  if cur < floor then redis.call('SET', KEYS[i], floor); cur = floor end
  if delta > 0 and not done then cur = redis.call('INCRBY', KEYS[i], delta) end
  if cur > 0 then redis.call('EXPIREAT', KEYS[i], ARGV[j + 3]) end
  values[#values + 1] = cur
end
if seq > 0 then redis.call('SET', KEYS[1], seq, 'EX', ARGV[2]) end
return {values, redis.call('SMEMBERS', KEYS[2])}
"""


@dataclass(slots=True)
class _Batch:
    seq: int
    tokens: dict[tuple[str, str], int]  # (team, day) -> tokens
    # Holds of requests booked before `tokens` was taken: let go in Redis once their usage
    # is in the counters (never before, so that the fleet never counts a request as neither).
    releases: dict[str, int]


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
        self._seen: dict[str, int] = {}  # counter key -> last total read (this period only)
        self._lock = asyncio.Lock()
        self._apply = client.register_script(_APPLY)
        self._reserve = client.register_script(RESERVE_SCRIPT)
        self._releases: dict[str, int] = {}  # team -> reserved holds of booked requests
        self._let_go_now: dict[str, int] = {}  # team -> what those held beyond their usage
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
    ) -> SharedState:
        """Connect and read the shared totals; never raises because Redis is down.

        With Redis up its counters are the truth and the local usage log is not read (it
        holds only this replica's share, already counted there). With Redis down the book
        is rebuilt from `usage_log`, if given, until the first successful sync replaces it.
        A URL that is not a Redis URL raises ValueError.
        """
        state = cls(connect(url), quotas, metrics, interval_s=interval_s, prefix=prefix)
        if not await state.sync() and usage_log and usage_log != "-":
            await asyncio.to_thread(functools.partial(quotas.rebuild, usage_log, amount=amount))
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
        """Sync every `interval_s` until `stop` is set."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)
            await self.sync()

    async def aclose(self) -> None:
        """Hand over what is still unsent (if Redis answers soon), then close the pool."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.sync(), FINAL_SYNC_S)  # an unreachable host: give up
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
        self, team: str, amount: int, daily: int | None, monthly: int | None
    ) -> bool | None:
        """Hold `amount` in the fleet's holds for `team` unless its counts and holds reach
        a limit: True held, False refused; None when Redis did not answer in time (the
        replica's own check stands, as with no shared state)."""
        now = self._clock()
        keys = [
            day_key(team, now.strftime("%Y-%m-%d"), self.prefix),
            month_key(team, now.strftime("%Y-%m"), self.prefix),
            hold_key(team, self.prefix),
        ]
        let_go = self._let_go_now.pop(team, 0)
        args = [-1 if daily is None else daily, -1 if monthly is None else monthly]
        args += [amount, HOLD_TTL_S, let_go]
        try:
            answer = await asyncio.wait_for(self._reserve(keys=keys, args=args), RESERVE_TIMEOUT_S)
        except FAILURES as exc:  # TimeoutError among them
            if let_go:  # not known to be let go: with the next sync, then
                self._let_go_now[team] = self._let_go_now.get(team, 0) + let_go
            self.health.failed("quota reserve", exc, self._unsent())
            return None
        return bool(answer)

    def release(self, team: str, amount: int, used: int) -> None:
        """A booked request's reserved hold of `amount`, of which it used `used`: the part
        it did not use is let go at once (with the team's next reserve, or the next sync);
        the part it used only with the sync that puts that usage in the counters."""
        kept = min(max(used, 0), amount)
        self._releases[team] = self._releases.get(team, 0) + kept
        if amount > kept:
            self._let_go_now[team] = self._let_go_now.get(team, 0) + amount - kept

    def _unsent(self) -> int:
        held = sum(self._batch.tokens.values()) if self._batch else 0
        return held + self.quotas.unsent()

    async def _sync(self) -> bool:
        """One round trip (two for teams new to us); True if it sent a retried batch only."""
        now = self._clock()
        today, month = now.strftime("%Y-%m-%d"), now.strftime("%Y-%m")
        retried = self._batch is not None
        if self._batch is None:
            # Together, with no await between: every release taken has its usage taken.
            taken, releases = self.quotas.take_pending(), self._releases
            self._releases = {}
            if taken or releases:
                self._seq += 1
                self._batch = _Batch(self._seq, taken, releases)
        batch = self._batch
        counters: dict[str, list[int]] = {}  # key -> [delta, expire-at]
        known = set(self.quotas.teams())  # as of now: teams added during the await wait a round
        for team in known:
            counters[day_key(team, today, self.prefix)] = [0, _ts(day_end(today))]
            counters[month_key(team, month, self.prefix)] = [0, _ts(month_end(month))]
        for (team, day), tokens in (batch.tokens if batch else {}).items():
            for key, end in (
                (day_key(team, day, self.prefix), day_end(day)),
                (month_key(team, day[:7], self.prefix), month_end(day[:7])),
            ):
                counters.setdefault(key, [0, _ts(end)])[0] += tokens
        teams_key = f"{self.prefix}teams:{month}"
        new_teams = sorted({team for team, _ in batch.tokens}) if batch else []
        args: list[Any] = [batch.seq if batch else 0, MARKER_TTL_S]
        args += [_ts(month_end(month)), len(new_teams), *new_teams]
        for key, (delta, at) in counters.items():
            args += [delta, self._seen.get(key, 0), at]
        keys = [f"{self.prefix}applied:{self._replica}", teams_key, *counters]
        reply: list[Any] = await self._apply(keys=keys, args=args)
        let_go, self._let_go_now = self._let_go_now, {}
        if batch is not None:  # the usage is in: the holds it was under may go too
            for team, amount in batch.releases.items():
                let_go[team] = let_go.get(team, 0) + amount
            batch.releases = {}
        if let_go:
            pipe = self.client.pipeline(transaction=True)  # all of them, or none
            for team, amount in let_go.items():
                pipe.decrby(hold_key(team, self.prefix), amount)
            try:
                await pipe.execute()
            except BaseException:
                for team, amount in let_go.items():  # next round
                    self._let_go_now[team] = self._let_go_now.get(team, 0) + amount
                raise
        self._batch = None  # acknowledged: applied exactly once
        # Floors for the next round: what Redis holds now, our batch included.
        self._seen = totals = {k: int(v) for k, v in zip(counters, reply[0], strict=True)}
        others = sorted(set(reply[1]) - known)
        if others:  # teams counted only by other replicas so far
            more = [
                k
                for t in others
                for k in (day_key(t, today, self.prefix), month_key(t, month, self.prefix))
            ]
            values = await self.client.mget(more)
            totals.update({k: int(v or 0) for k, v in zip(more, values, strict=True)})
        for team in sorted(known.union(others)):
            day_total = totals.get(day_key(team, today, self.prefix), 0)
            month_total = totals.get(month_key(team, month, self.prefix), 0)
            self.quotas.install(team, today, day_total, month_total)
            if self.prefix == PREFIX:  # the gauge holds tokens; spend is not shown there
                self.health.metrics.set_shared_quota(team, day_total, month_total)
        return retried and self.quotas.unsent() > 0


def _ts(when: datetime) -> int:
    return int((when + PERIOD_MARGIN).timestamp())
