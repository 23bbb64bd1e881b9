"""The shared state's Redis keys and the admission script: per team per period counters
(expiring after their period ends), and the fleet's holds of requests in flight."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

PREFIX = "cp:quota:"

# A request admitted under a hard quota reserves what it may use in the fleet's holds
# (KEYS[3]) unless the fleet's counts for the day (KEYS[1]) or month (KEYS[2]) plus the
# holds reach a limit (ARGV[1], ARGV[2]; -1: none). ARGV[3]: the amount, ARGV[4]: the
# holds' expiry (a replica that dies holding lets go then); ARGV[5]: what this replica's
# booked requests of the team hold beyond what they used, let go first. 1: reserved, 0: refused.
RESERVE_SCRIPT = """
if tonumber(ARGV[5]) > 0 then redis.call('DECRBY', KEYS[3], ARGV[5]) end
local held = tonumber(redis.call('GET', KEYS[3]) or '0')
local day = tonumber(redis.call('GET', KEYS[1]) or '0')
local month = tonumber(redis.call('GET', KEYS[2]) or '0')
local dlim, mlim = tonumber(ARGV[1]), tonumber(ARGV[2])
if (dlim >= 0 and day + held >= dlim) or (mlim >= 0 and month + held >= mlim) then return 0 end
redis.call('INCRBY', KEYS[3], ARGV[3])
redis.call('EXPIRE', KEYS[3], ARGV[4])
return 1
"""
HOLD_TTL_S = 900  # past the longest request (the upstream timeout's default is 600 s)
RESERVE_TIMEOUT_S = 0.5  # Redis slower than this: the replica's own check stands


def day_key(team: str, day: str, prefix: str = PREFIX) -> str:
    return f"{prefix}{team}:d:{day}"


def month_key(team: str, month: str, prefix: str = PREFIX) -> str:
    return f"{prefix}{team}:m:{month}"


def day_end(day: str) -> datetime:
    return datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC) + timedelta(days=1)


def month_end(month: str) -> datetime:
    start = datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC)
    return (start + timedelta(days=32)).replace(day=1)


def hold_key(team: str, prefix: str = PREFIX) -> str:
    return f"{prefix}hold:{team}"
