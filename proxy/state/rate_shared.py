"""Rate limits shared by the fleet: the buckets of usage/rate_limits.py kept in Redis.

A draw is one script (atomic across replicas), timed by Redis's own clock so that the
replicas' clocks never disagree about a refill. A replica whose Redis does not answer
within DRAW_TIMEOUT_S draws on its own buckets instead (as without `--state`), and says
so in its health; settling is sent in the background and never waited for.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from redis.asyncio import Redis

from proxy.state.redis_link import FAILURES, Health
from proxy.usage.rate_limits import Draw, Level, RateBook, Refused, until_full, until_some

log = logging.getLogger("context_proxy.shared_state")

PREFIX = "cp:rate:"
DRAW_TIMEOUT_S = 0.25
# A bucket's hash: level and the time it was read (ms, Redis's clock); it expires once a
# full refill would have passed. ARGV per key: its limit, the amount, what it must hold.
_DRAW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = #KEYS
local levels = {}
for i = 1, n do
  local cap, need = tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i])
  local got = redis.call('HMGET', KEYS[i], 'level', 'at')
  local level, at = tonumber(got[1]), tonumber(got[2])
  if level == nil then level, at = cap, now end
  level = math.min(cap, level + math.max(now - at, 0) * cap / 60000)
  levels[i] = level
  if level <= 0 or level < need then return {0, i, tostring(level)} end
end
local out = {1}
for i = 1, n do
  local cap, left = tonumber(ARGV[3 * i - 2]), levels[i] - tonumber(ARGV[3 * i - 1])
  redis.call('HSET', KEYS[i], 'level', tostring(left), 'at', now)
  redis.call('PEXPIRE', KEYS[i], 61000 + math.max(0, math.ceil(-left * 60000 / cap)))
  out[#out + 1] = tostring(left)
end
return out
"""
_SETTLE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cap = tonumber(ARGV[1])
local got = redis.call('HMGET', KEYS[1], 'level', 'at')
local level, at = tonumber(got[1]), tonumber(got[2])
if level == nil then return 0 end
level = math.min(cap, level + math.max(now - at, 0) * cap / 60000 + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'level', tostring(level), 'at', now)
redis.call('PEXPIRE', KEYS[1], 61000 + math.max(0, math.ceil(-level * 60000 / cap)))
return 1
"""


class SharedRates:
    """The fleet's buckets in Redis, with this replica's own for when Redis is away."""

    def __init__(self, client: Redis, health: Health, local: RateBook | None = None) -> None:
        self._draw = client.register_script(_DRAW)
        self._settle = client.register_script(_SETTLE)
        self._health = health
        self.local = local or RateBook()
        self._tasks: set[asyncio.Task[None]] = set()

    async def draw(self, draws: Sequence[Draw]) -> Refused | list[Level]:
        keys = [PREFIX + d.bucket for d in draws]
        args: list[str | int] = []
        for d in draws:
            args += [d.per_minute, repr(float(d.amount)), repr(float(d.need))]
        try:
            answer = await asyncio.wait_for(self._draw(keys=keys, args=args), DRAW_TIMEOUT_S)
        except FAILURES as exc:  # TimeoutError among them: this replica's own buckets
            self._health.failed("rate limit draw", exc, 0)
            return self.local.draw(draws)
        if int(answer[0]) == 0:
            d = draws[int(answer[1]) - 1]
            level = float(answer[2])
            return Refused(d.bucket, d.per_minute, until_some(level, d.per_minute, d.need))
        levels = [float(v) for v in answer[1:]]
        return [
            Level(d.bucket, d.per_minute, left, until_full(left, d.per_minute))
            for d, left in zip(draws, levels, strict=True)
        ]

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
            await self._settle(keys=[PREFIX + bucket], args=[per_minute, repr(float(amount))])
        except FAILURES as exc:
            self._health.failed("rate limit settle", exc, 0)
        except Exception:  # a bug: logged, the request's row is written all the same
            log.exception("shared state: settling a rate limit failed")

    async def aclose(self, timeout_s: float) -> None:
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=timeout_s)
