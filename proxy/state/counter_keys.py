"""The shared state's Redis keys and scripts: per team per period counters (expiring after
their period ends), and the fleet's holds of requests in flight (holds.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

PREFIX = "cp:quota:"

# A request admitted under a hard quota reserves what it may use as its own entry in the
# team's holds (KEYS[3], a hash: member -> "amount|expires|day") unless the fleet's counts for
# the day (KEYS[1]) or month (KEYS[2]) plus the live holds reach a limit (ARGV[1], ARGV[2];
# -1: none). Entries past their expiry or of another day are dropped on the way. A request
# already let go (KEYS[4], its marker: a reserve Redis applies after the replica stopped
# waiting, and after its release) is not held. ARGV: limits, member, amount, expiry, now,
# day, the day's end (the hash expires with it). 1: reserved, 0: refused.
RESERVE_SCRIPT = """
if redis.call('EXISTS', KEYS[4]) == 1 then return 0 end
local now, today = tonumber(ARGV[6]), ARGV[7]
local held = 0
local entries = redis.call('HGETALL', KEYS[3])
for i = 1, #entries, 2 do
  local amount, expires, day = string.match(entries[i + 1], '^(%d+)|(%d+)|(.+)$')
  if amount == nil or tonumber(expires) <= now or day ~= today then
    redis.call('HDEL', KEYS[3], entries[i])
  else
    held = held + tonumber(amount)
  end
end
local dayused = tonumber(redis.call('GET', KEYS[1]) or '0')
local monthused = tonumber(redis.call('GET', KEYS[2]) or '0')
local dlim, mlim = tonumber(ARGV[1]), tonumber(ARGV[2])
if (dlim >= 0 and dayused + held >= dlim) or (mlim >= 0 and monthused + held >= mlim) then
  return 0
end
redis.call('HSET', KEYS[3], ARGV[3], ARGV[4] .. '|' .. ARGV[5] .. '|' .. today)
redis.call('EXPIREAT', KEYS[3], ARGV[8])
return 1
"""
# A request's entry let go and what it used counted, once (KEYS[4], its marker, set first:
# a retry, or a reserve applied late, finds it). ARGV: member, used, the day's and month's
# expiry (as the counters have), the marker's lifetime.
RELEASE_SCRIPT = """
if not redis.call('SET', KEYS[4], '1', 'NX', 'EX', ARGV[5]) then return 0 end
redis.call('HDEL', KEYS[3], ARGV[1])
local used = tonumber(ARGV[2])
if used > 0 then
  redis.call('INCRBY', KEYS[1], used)
  redis.call('EXPIREAT', KEYS[1], ARGV[3])
  redis.call('INCRBY', KEYS[2], used)
  redis.call('EXPIREAT', KEYS[2], ARGV[4])
end
return 1
"""
# A live replica's entries renewed (ARGV[1]: their new expiry; ARGV[2..]: members).
REFRESH_SCRIPT = """
for i = 2, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v then
    local amount, expires, day = string.match(v, '^(%d+)|(%d+)|(.+)$')
    if amount then redis.call('HSET', KEYS[1], ARGV[i], amount .. '|' .. ARGV[1] .. '|' .. day) end
  end
end
return 1
"""
# A live replica renews its entries with every sync (0.5 s): one that dies lets go of them
# within this, whatever the other replicas do.
HOLD_TTL_S = 15
RESERVE_TIMEOUT_S = 0.5  # Redis slower than this: the replica's own check stands
DONE_TTL_S = 2 * 24 * 3600  # a released entry's marker: past any retry or late reserve
PERIOD_MARGIN = timedelta(days=2)  # counters outlive their period, for late records and skew


def day_key(team: str, day: str, prefix: str = PREFIX) -> str:
    return f"{prefix}{team}:d:{day}"


def month_key(team: str, month: str, prefix: str = PREFIX) -> str:
    return f"{prefix}{team}:m:{month}"


def holds_key(team: str, prefix: str = PREFIX) -> str:
    return f"{prefix}holds:{team}"


def done_key(member: str, prefix: str = PREFIX) -> str:
    return f"{prefix}released:{member}"


def day_end(day: str) -> datetime:
    return datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC) + timedelta(days=1)


def month_end(month: str) -> datetime:
    start = datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC)
    return (start + timedelta(days=32)).replace(day=1)


def timestamp(when: datetime) -> int:
    return int(when.timestamp())
