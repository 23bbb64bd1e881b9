"""What a replica hands the fleet's rate-limit buckets: what it drew on its own while Redis was
away, and, to a Redis that came back without the fleet's marker, the last level it read of
each bucket (refilled since).

Both are taken off the bucket as additions (draws), never written over its level: draws
other replicas make meanwhile stay. Levels read are shared knowledge, so of those only the
lowest any replica hands over counts (the restored hash keeps the debt put back so far, and
it refills like the bucket); what a replica drew on its own is its alone, and all of it is
taken. A bucket nobody has read for a minute is full again and nothing is put back.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.state.counter_keys import mark

RESTORED = "cp:rate:restored:"

# KEYS: [1] the fleet's marker, [2..] buckets. ARGV: [1] the marker this replica knows ('':
# none), [2] a new marker, [3] where what was put back is kept, then per bucket (its limit,
# the last level read or '', when (ms, Redis's clock), what this replica drew on its own
# within the last minute, less what it gave back there).
# Returns the marker.
HANDOVER_SCRIPT = (
    mark(1, 2)
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local restore = ARGV[1] ~= '' and ARGV[1] ~= id
local rec = ARGV[3] .. id
for i = 2, #KEYS do
  local j = 3 + (i - 2) * 4
  local cap, known = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
  local at, take = tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4])
  local rate = cap / 60000
  if restore and known then
    local debt = cap - math.min(cap, known + math.max(now - at, 0) * rate)
    local back, prior = 0, redis.call('HGET', rec, KEYS[i])
    if prior then
      local d, a = string.match(prior, '^([^|]+)|(%d+)$')
      back = math.max(0, tonumber(d) - math.max(now - tonumber(a), 0) * rate)
    end
    if debt > back then
      take = take + debt - back
      redis.call('HSET', rec, KEYS[i], tostring(debt) .. '|' .. now)
      redis.call('PEXPIRE', rec, 120000)
    end
  end
  if take ~= 0 then
    local got = redis.call('HMGET', KEYS[i], 'level', 'at')
    local level, last = tonumber(got[1]), tonumber(got[2])
    if level == nil then level, last = cap, now end
    level = math.min(cap, math.min(cap, level + math.max(now - last, 0) * rate) - take)
    redis.call('HSET', KEYS[i], 'level', tostring(level), 'at', now)
    redis.call('PEXPIRE', KEYS[i], 61000 + math.max(0, math.ceil(-level * 60000 / cap)))
  end
end
return id
"""
)


@dataclass(frozen=True, slots=True)
class Known:
    """A bucket's level as a reply last told it: after a draw or a settle, at Redis's time."""

    per_minute: int
    level: float
    at_ms: int


def handover_args(
    epoch: str | None,
    candidate: str,
    known: dict[str, Known],
    owed: dict[str, tuple[int, float]],
) -> tuple[list[str], list[str | int]]:
    """The buckets (keys) and ARGV of a handover: `known` levels (handed back only to a
    Redis that lost the fleet's marker) and `owed` (bucket -> (limit, drawn on its own))."""
    names = sorted(set(known) | set(owed))
    args: list[str | int] = [epoch or "", candidate, RESTORED]
    for name in names:
        seen = known.get(name)
        limit = seen.per_minute if seen else owed[name][0]
        level, at = (repr(seen.level), seen.at_ms) if seen else ("", 0)
        args += [limit, level, at, repr(owed.get(name, (0, 0.0))[1])]
    return names, args
