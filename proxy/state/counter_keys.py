"""The shared state's Redis keys: per team per period counters (expiring after their period
ends), the fleet's holds of requests in flight (holds.py), and the fleet's marker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

PREFIX = "cp:quota:"
# The fleet's marker: an id the first replica to find it missing writes (no expiry). A
# Redis without it has lost the fleet's state (restarted empty, flushed): each replica that
# knew another id hands over what it counted (replicas.py, rate_shared.py). Never guessed
# from a missing counter, which is also what a new day or a new team looks like.
MARKER_KEY = "cp:fleet:epoch"
# Counted with every release: orders releases among the syncs' reads of the counters.
WRITES_KEY = "cp:fleet:writes"
# Lua: KEYS[m] the marker, ARGV[c] a new id to write if it is missing; `id` is the marker's.
MARK = """
local id = redis.call('GET', KEYS[{m}])
if not id then id = ARGV[{c}]; redis.call('SET', KEYS[{m}], id) end
"""


def mark(marker_key: int, candidate_arg: int) -> str:
    """The MARK snippet for a script's own KEYS and ARGV positions."""
    return MARK.replace("{m}", str(marker_key)).replace("{c}", str(candidate_arg))


# A live replica renews its entries from a thread of its own (renewal.py), every
# renew_interval(ttl) seconds: one that dies, or loses Redis, lets go of them within this.
HOLD_TTL_S = 15
RESERVE_TIMEOUT_S = 0.5  # Redis slower than this: the replica's own check stands
DONE_TTL_S = 2 * 24 * 3600  # a released entry's marker: past any retry or late reserve
PERIOD_MARGIN = timedelta(days=2)  # counters outlive their period, for late records and skew


def renew_interval(ttl_s: float) -> float:
    """How often a replica renews its holds: several times within their lifetime."""
    return max(0.05, min(0.5, ttl_s / 4))


def holds_expiry_s(ttl_s: float) -> int:
    """How long a team's holds hash outlives its latest write: past every entry in it."""
    return int(ttl_s) * 2 + 60


def day_key(team: str, day: str, prefix: str = PREFIX) -> str:
    return f"{prefix}{team}:d:{day}"


def month_key(team: str, month: str, prefix: str = PREFIX) -> str:
    return f"{prefix}{team}:m:{month}"


def teams_key(month: str, prefix: str = PREFIX) -> str:
    """The set of teams counted in `month`: how a replica learns of teams it never served."""
    return f"{prefix}teams:{month}"


def holds_key(team: str, prefix: str = PREFIX) -> str:
    return f"{prefix}holds:{team}"


def done_key(member: str, prefix: str = PREFIX) -> str:
    return f"{prefix}released:{member}"


def restored_prefix(prefix: str = PREFIX) -> str:
    """Where what was put back into a Redis that came back empty is kept (handover.py)."""
    return f"{prefix}restored:"


def day_end(day: str) -> datetime:
    return datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC) + timedelta(days=1)


def month_end(month: str) -> datetime:
    start = datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC)
    return (start + timedelta(days=32)).replace(day=1)


def timestamp(when: datetime) -> int:
    return int(when.timestamp())
