"""The fleet's holds in Redis: the scripts that reserve, let go of and renew a request's entry.

A team's holds are a hash: member -> "amount|expires|day". Every live entry counts against
the team's limits whatever its day: a request in flight at midnight is charged to the day
it is booked in, so its hold stays counted there. The hash outlives its newest entry.
"""

from __future__ import annotations

from proxy.state.counter_keys import mark

# A request admitted under a hard quota reserves what it may use as its own entry in the
# team's holds (KEYS[3]) unless the fleet's counts for the day (KEYS[1]) or month (KEYS[2])
# plus the live holds reach a limit (ARGV[1], ARGV[2]; -1: none). Expired entries are dropped
# on the way. A request already let go (KEYS[4], its marker: a reserve Redis applies after
# the replica stopped waiting, and after its release) is not held. A Redis whose marker
# (KEYS[5]) is not the one the replica knows (ARGV[9]) has not had the fleet's counts handed
# back yet: 2, and the replica's own check stands. ARGV: limits, member, amount, expiry, now,
# day, the hash's lifetime, the marker. 1: reserved, 0: refused.
RESERVE_SCRIPT = """
if redis.call('GET', KEYS[5]) ~= ARGV[9] then return 2 end
if redis.call('EXISTS', KEYS[4]) == 1 then return 0 end
local now = tonumber(ARGV[6])
local held = 0
local entries = redis.call('HGETALL', KEYS[3])
for i = 1, #entries, 2 do
  local amount, expires = string.match(entries[i + 1], '^(%d+)|(%d+)|')
  if amount == nil or tonumber(expires) <= now then
    redis.call('HDEL', KEYS[3], entries[i])
  elseif entries[i] ~= ARGV[3] then
    held = held + tonumber(amount)
  end
end
local dayused = tonumber(redis.call('GET', KEYS[1]) or '0')
local monthused = tonumber(redis.call('GET', KEYS[2]) or '0')
local dlim, mlim = tonumber(ARGV[1]), tonumber(ARGV[2])
if (dlim >= 0 and dayused + held >= dlim) or (mlim >= 0 and monthused + held >= mlim) then
  redis.call('HDEL', KEYS[3], ARGV[3])
  return 0
end
redis.call('HSET', KEYS[3], ARGV[3], ARGV[4] .. '|' .. ARGV[5] .. '|' .. ARGV[7])
if redis.call('TTL', KEYS[3]) < tonumber(ARGV[8]) then redis.call('EXPIRE', KEYS[3], ARGV[8]) end
return 1
"""
# A request's entry let go and what it used counted, once (KEYS[4], its marker, set first: a
# retry, or a reserve applied late, finds it). The fleet's write count (KEYS[6]) orders it
# among the syncs' reads: "marker|count" is what the entry's marker holds and what the step
# returns, with 1, or 0 when it was counted before. A team that used something joins the
# month's set of teams (KEYS[7]), so replicas started later learn its totals. ARGV: member,
# used, the day's and month's expiry (as the counters have), the marker's lifetime, a new
# fleet marker, the team.
RELEASE_SCRIPT = (
    mark(5, 6)
    + """
local prior = redis.call('GET', KEYS[4])
if prior then return {0, prior} end
local counted = id .. '|' .. redis.call('INCR', KEYS[6])
redis.call('SET', KEYS[4], counted, 'EX', ARGV[5])
redis.call('HDEL', KEYS[3], ARGV[1])
local used = tonumber(ARGV[2])
if used > 0 then
  redis.call('INCRBY', KEYS[1], used)
  redis.call('EXPIREAT', KEYS[1], ARGV[3])
  redis.call('INCRBY', KEYS[2], used)
  redis.call('EXPIREAT', KEYS[2], ARGV[4])
  redis.call('SADD', KEYS[7], ARGV[7])
  redis.call('EXPIREAT', KEYS[7], ARGV[4])
end
return {1, counted}
"""
)
# A live replica's entries renewed (KEYS[1] the team's holds, KEYS[1 + i] the i-th entry's
# release marker; ARGV: the new expiry, today, the hash's lifetime, then member and amount
# per entry). An entry Redis lost (restarted empty, or a reserve it never made) is made
# again, unless its request has been let go.
REFRESH_SCRIPT = """
for i = 1, #KEYS - 1 do
  local member, amount = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local v = redis.call('HGET', KEYS[1], member)
  local held = v and string.match(v, '^(%d+)|')
  if held then
    redis.call('HSET', KEYS[1], member, held .. '|' .. ARGV[1] .. '|' .. ARGV[2])
  elseif redis.call('EXISTS', KEYS[1 + i]) == 0 then
    redis.call('HSET', KEYS[1], member, amount .. '|' .. ARGV[1] .. '|' .. ARGV[2])
  end
end
if #KEYS > 1 and redis.call('TTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return 1
"""
