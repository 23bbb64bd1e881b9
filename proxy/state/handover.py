"""The sync's one atomic step, and what a replica hands a Redis that lost the fleet's counts.

Redis without the fleet's marker has lost its state (restarted without persistence, or
flushed): its counters start again from nothing while every replica still knows the last
totals it read and what it counted since. Each replica that knew the old marker hands over,
as additions (never a SET or a maximum written over the counter, which would overwrite what
other replicas count meanwhile):

- the last total it read of each counter, less what the fleet has put back already: the
  counter is raised to the newest total any replica read, once, in whatever order they come;
- what its releases counted after that read (holds.py keeps them, with their place among the
  fleet's writes, until a sync reads them back), unless the newest total put back holds them
  already; a total put back later takes back out the releases it turns out to hold;
- its unsent increments, as with every sync.

What was put back is kept per marker (`restored:<marker>`: the total per counter, and the
releases added on top of it), so handing over twice adds nothing. Only what a replica that
died before handing it over counted after the newest total any replica read is lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.state.counter_keys import mark

# KEYS: [1] this replica's last applied batch number, [2] the set of teams counted this
# month, [3] the fleet's marker, [4] the fleet's write count, [5..] counters. ARGV: [1] batch
# number, [2] its TTL, [3] the set's expiry, [4] the marker this replica knows ('' none),
# [5] a new marker, [6] what was put back: its expiry, [7] its key prefix, [8] how many teams
# to add, the teams, then (delta, last total read, the write count then, expire-at) per
# counter, then how many releases to hand over and (marker, write count, counter index,
# amount) for each. A batch already applied (its reply was lost) is not applied twice.
# Within one marker, a counter below the last total read lost its latest writes (a
# persistent Redis cut short): raised to it. Returns {totals, the teams, marker, write count}.
APPLY_SCRIPT = (
    mark(3, 5)
    + """
local seq, mine, pre = tonumber(ARGV[1]), ARGV[4], ARGV[7] .. id
local restore = mine ~= '' and mine ~= id
local done = tonumber(redis.call('GET', KEYS[1]) or '0') >= seq
local function put_back(key)
  local v = redis.call('HGET', pre, key)
  if not v then return 0, 0, '' end
  local total, at, of = string.match(v, '^(%d+)|(%d+)|(.*)$')
  return tonumber(total), tonumber(at), of
end
local nteams = tonumber(ARGV[8])
for i = 1, nteams do redis.call('SADD', KEYS[2], ARGV[8 + i]) end
if nteams > 0 then redis.call('EXPIREAT', KEYS[2], ARGV[3]) end
local base, n = 8 + nteams, #KEYS - 4
for i = 1, n do
  local key, j = KEYS[4 + i], base + (i - 1) * 4
  local delta, floor, at = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3])
  if restore then
    local back = put_back(key)
    if floor > back then
      local added, covered = pre .. ':' .. key, 0
      for _, m in ipairs(redis.call('ZRANGEBYSCORE', added, '-inf', at)) do
        local of, amount = string.match(m, '^(.*)|%d+|(%d+)$')
        if of == mine then
          covered = covered + tonumber(amount)
          redis.call('ZREM', added, m)
        end
      end
      redis.call('INCRBY', key, math.max(0, floor - back - covered))
      redis.call('HSET', pre, key, floor .. '|' .. at .. '|' .. mine)
      redis.call('EXPIREAT', pre, ARGV[6])
    end
  elseif mine == id then
    local cur = tonumber(redis.call('GET', key) or '0')
    if cur < floor then redis.call('INCRBY', key, floor - cur) end
  end
  if delta > 0 and not done then redis.call('INCRBY', key, delta) end
end
local e = base + 4 * n + 1
for k = 1, tonumber(ARGV[e]) do
  local a = e + 4 * (k - 1)
  local of, at, amount = ARGV[a + 1], tonumber(ARGV[a + 2]), ARGV[a + 4]
  local key = KEYS[4 + tonumber(ARGV[a + 3])]
  if of ~= id then
    local _, back_at, back_of = put_back(key)
    local added, m = pre .. ':' .. key, of .. '|' .. at .. '|' .. amount
    if not (back_of == of and at <= back_at) and not redis.call('ZSCORE', added, m) then
      redis.call('INCRBY', key, amount)
      redis.call('ZADD', added, at, m)
      redis.call('EXPIREAT', added, ARGV[6])
    end
  end
end
local values = {}
for i = 1, n do
  local cur = tonumber(redis.call('GET', KEYS[4 + i]) or '0')
  if cur > 0 then redis.call('EXPIREAT', KEYS[4 + i], ARGV[base + (i - 1) * 4 + 4]) end
  values[i] = cur
end
if seq > 0 then redis.call('SET', KEYS[1], seq, 'EX', ARGV[2]) end
local writes = tonumber(redis.call('GET', KEYS[4]) or '0')
return {values, redis.call('SMEMBERS', KEYS[2]), id, writes}
"""
)


def counter_args(
    counters: dict[str, list[int]],
    floors: dict[str, tuple[int, int]],
    handed: Sequence[tuple[str, int, str, int]],
) -> list[Any]:
    """The per-counter and per-release part of the script's ARGV: (delta, last total read,
    the write count it was read at, expire-at) per counter in `counters` (key -> [delta,
    expire-at]), then the releases (marker, write count, counter key, amount)."""
    args: list[Any] = []
    index = {}
    for n, (key, (delta, at)) in enumerate(counters.items(), start=1):
        args += [delta, *floors.get(key, (0, 0)), at]
        index[key] = n
    args.append(len(handed))
    for epoch, write, key, amount in handed:
        args += [epoch, write, index[key], amount]
    return args
