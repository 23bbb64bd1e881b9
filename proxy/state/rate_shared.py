"""Rate limits shared by the fleet: the buckets of usage/rate_limits.py kept in Redis.

A draw is one script (atomic across replicas), timed by Redis's own clock so that the
replicas' clocks never disagree about a refill. A replica whose Redis does not answer
within DRAW_TIMEOUT_S draws on its own buckets instead (as without `--state`), and says
so in its health; settling is sent in the background and never waited for. When Redis
answers again, what the replica drew on its own is handed over (rate_handover.py), and a
Redis that lost the fleet's marker also gets back the levels the replicas last read.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Sequence

from redis.asyncio import Redis

from proxy.state.counter_keys import MARKER_KEY
from proxy.state.rate_handover import HANDOVER_SCRIPT, Known, handover_args
from proxy.state.redis_link import FAILURES, Health
from proxy.usage.rate_limits import (
    MINUTE_S,
    Draw,
    Level,
    RateBook,
    Refused,
    until_full,
    until_some,
)

log = logging.getLogger("context_proxy.shared_state")

PREFIX = "cp:rate:"
DRAW_TIMEOUT_S = 0.25
MAX_KNOWN = 10_000  # buckets whose last level is kept (bounded by the policies' keys)
MAX_HERE = 100_000  # draws on this replica's own buckets kept to hand over
# A bucket's hash: level and the time it was read (ms, Redis's clock); it expires once a
# full refill would have passed. KEYS: buckets, then the fleet's marker; ARGV: the marker
# this replica knows, then per key its limit, the amount, what it must hold. {-1}: another
# marker (hand over first); {0, i, level, now}: refused; {1, now, levels...}: drawn.
_DRAW = """
local n = #KEYS - 1
if redis.call('GET', KEYS[n + 1]) ~= ARGV[1] then return {-1} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local levels = {}
for i = 1, n do
  local cap, need = tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i + 1])
  local got = redis.call('HMGET', KEYS[i], 'level', 'at')
  local level, at = tonumber(got[1]), tonumber(got[2])
  if level == nil then level, at = cap, now end
  level = math.min(cap, level + math.max(now - at, 0) * cap / 60000)
  levels[i] = level
  if level <= 0 or level < need then return {0, i, tostring(level), now} end
end
local out = {1, now}
for i = 1, n do
  local cap, left = tonumber(ARGV[3 * i - 1]), levels[i] - tonumber(ARGV[3 * i])
  redis.call('HSET', KEYS[i], 'level', tostring(left), 'at', now)
  redis.call('PEXPIRE', KEYS[i], 61000 + math.max(0, math.ceil(-left * 60000 / cap)))
  out[#out + 1] = tostring(left)
end
return out
"""
# {level, now, the fleet's marker} after settling; {} for a bucket that is full (expired).
_SETTLE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cap = tonumber(ARGV[1])
local got = redis.call('HMGET', KEYS[1], 'level', 'at')
local level, at = tonumber(got[1]), tonumber(got[2])
if level == nil then return {} end
level = math.min(cap, level + math.max(now - at, 0) * cap / 60000 + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'level', tostring(level), 'at', now)
redis.call('PEXPIRE', KEYS[1], 61000 + math.max(0, math.ceil(-level * 60000 / cap)))
return {tostring(level), now, redis.call('GET', KEYS[2]) or ''}
"""


class SharedRates:
    """The fleet's buckets in Redis, with this replica's own for when Redis is away."""

    def __init__(self, client: Redis, health: Health, local: RateBook | None = None) -> None:
        self._draw = client.register_script(_DRAW)
        self._settle = client.register_script(_SETTLE)
        self._handover = client.register_script(HANDOVER_SCRIPT)
        self._health = health
        self.local = local or RateBook()
        self._tasks: set[asyncio.Task[None]] = set()
        self._epoch: str | None = None  # the fleet's marker the levels below were read under
        self._known: dict[str, Known] = {}  # bucket -> its level as last read
        # What was drawn (or settled) on this replica's own buckets, to hand over: (when, on
        # the monotonic clock, bucket, its limit, amount). As drawn, not as the local bucket
        # refilled since: the fleet's bucket refills over the same time.
        self._here: list[tuple[float, str, int, float]] = []
        self._due = True  # a handover before the next draw: at start, after local draws
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self._replica = uuid.uuid4().hex[:12]

    async def draw(self, draws: Sequence[Draw]) -> Refused | list[Level]:
        keys = [PREFIX + d.bucket for d in draws] + [MARKER_KEY]
        try:
            for _ in range(2):  # a marker that changed: hand over, draw again
                if self._due:
                    await asyncio.wait_for(self._hand_over(), DRAW_TIMEOUT_S)
                args: list[str | int] = [self._epoch or ""]
                for d in draws:
                    args += [d.per_minute, repr(float(d.amount)), repr(float(d.need))]
                answer = await asyncio.wait_for(self._draw(keys=keys, args=args), DRAW_TIMEOUT_S)
                if int(answer[0]) != -1:
                    break
                self._due = True
            else:
                raise TimeoutError("the fleet's marker keeps changing")
        except FAILURES as exc:  # TimeoutError among them: this replica's own buckets
            self._health.failed("rate limit draw", exc, 0)
            got = self.local.draw(draws)
            if not isinstance(got, Refused):  # handed over once Redis answers
                self._drawn_here(draws)
            return got
        if int(answer[0]) == 0:
            d = draws[int(answer[1]) - 1]
            level = float(answer[2])
            self._learn(d.bucket, d.per_minute, level, int(answer[3]))
            return Refused(d.bucket, d.per_minute, until_some(level, d.per_minute, d.need))
        now, levels = int(answer[1]), [float(v) for v in answer[2:]]
        for d, left in zip(draws, levels, strict=True):
            self._learn(d.bucket, d.per_minute, left, now)
        return [
            Level(d.bucket, d.per_minute, left, until_full(left, d.per_minute))
            for d, left in zip(draws, levels, strict=True)
        ]

    def _learn(self, bucket: str, per_minute: int, level: float, at_ms: int) -> None:
        seen = self._known.get(bucket)
        if seen is None or seen.at_ms <= at_ms:
            if seen is None and len(self._known) >= MAX_KNOWN:
                self._known.clear()  # a minute from now none of them would matter
            self._known[bucket] = Known(per_minute, level, at_ms)

    async def _hand_over(self) -> None:
        """What this replica drew on its own, and (to a Redis that lost the fleet's marker)
        the levels it last read, taken off the fleet's buckets; the marker learnt."""
        async with self._lock:
            if not self._due:
                return  # another draw handed over meanwhile
            taken, horizon = len(self._here), time.monotonic() - MINUTE_S
            owed: dict[str, tuple[int, float]] = {}
            for at, bucket, limit, amount in self._here[:taken]:
                if at >= horizon:  # older ones: a minute's refill has made up for them
                    owed[bucket] = (limit, owed.get(bucket, (limit, 0.0))[1] + amount)
            names, args = handover_args(self._epoch, self._new_epoch(), self._known, owed)
            keys = [MARKER_KEY] + [PREFIX + name for name in names]
            self._due = False  # a draw on its own from now on is handed over next time
            try:
                epoch = str(await self._handover(keys=keys, args=args))
            except BaseException:
                self._due = True
                raise
            del self._here[:taken]
            if epoch != self._epoch:
                self._known.clear()  # levels of a Redis that is gone
            self._epoch = epoch

    def _drawn_here(self, draws: Sequence[Draw]) -> None:
        now = time.monotonic()
        if len(self._here) >= MAX_HERE:  # a long outage: what is a minute old no longer counts
            self._here = [h for h in self._here if h[0] >= now - MINUTE_S]
        self._here += [(now, d.bucket, d.per_minute, d.amount) for d in draws]
        self._due = True

    def _new_epoch(self) -> str:
        return f"rates:{self._replica}#{next(self._ids)}"

    def settle(self, bucket: str, per_minute: int, amount: float) -> None:
        """`amount` back to the bucket, in the background (booking never waits on Redis)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(self._send_settle(bucket, per_minute, amount))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_settle(self, bucket: str, per_minute: int, amount: float) -> None:
        try:
            answer = await self._settle(
                keys=[PREFIX + bucket, MARKER_KEY], args=[per_minute, repr(float(amount))]
            )
        except FAILURES as exc:  # settled here, and handed over with what was drawn here
            self._health.failed("rate limit settle", exc, 0)
            self.local.settle(bucket, per_minute, amount)
            self._drawn_here([Draw(bucket, per_minute, -amount)])
            return
        except Exception:  # a bug: logged, the request's row is written all the same
            log.exception("shared state: settling a rate limit failed")
            return
        if answer and answer[2] == self._epoch:
            self._learn(bucket, per_minute, float(answer[0]), int(answer[1]))

    async def aclose(self, timeout_s: float) -> None:
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=timeout_s)
