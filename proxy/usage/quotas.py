"""Quotas: tokens per team per UTC day and month, rebuilt from the usage log at start."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, BinaryIO

import orjson

from proxy.policy import QuotaPolicy, ThresholdPolicy
from proxy.policy.model import MICRO
from proxy.types import Level
from proxy.usage.ledger import iter_records, level_for
from proxy.usage.log_files import rotated_logs

_SEEK_MIN_BYTES = 1 << 20  # below this a log is simply read whole
_SEEK_MARGIN = timedelta(days=1)  # long streams are logged after records that started later
# Unsent (team, day) entries kept while the shared state is unreachable; a day's entry holds
# any number of tokens, so this only binds with thousands of teams over a long outage.
MAX_PENDING = 10_000


@dataclass(frozen=True, slots=True)
class QuotaStatus:
    used: int  # tokens in the period that binds (the one nearest its limit)
    limit: int | None
    level: Level
    exceeded: bool  # used >= limit: the quota is spent
    period: str | None = None  # "day" or "month"; None without limits


def total_tokens_of(record: dict[str, Any]) -> int | None:
    """A usage row's tokens (what the token quotas count)."""
    tokens = record.get("total_tokens")
    return tokens if isinstance(tokens, int) else None


@dataclass(slots=True)
class _TeamUsage:
    day: str = ""  # "YYYY-MM-DD"; only the newest day and month are kept, so memory stays flat
    day_used: int = 0
    month: str = ""  # "YYYY-MM"
    month_used: int = 0


@functools.lru_cache(maxsize=4)
def _day_string(epoch_day: int) -> str:
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(days=epoch_day)).strftime("%Y-%m-%d")


def today() -> str:
    """The current UTC date "YYYY-MM-DD": formatted once a day, not twice per request
    (datetime.now + strftime was ~10 µs of each request's bookkeeping)."""
    return _day_string(int(time.time() // 86400))


def utc_day(ts: str) -> str | None:
    """The UTC date "YYYY-MM-DD" of an ISO 8601 timestamp, or None if it is not one."""
    if len(ts) >= 10 and (ts.endswith("Z") or ts.endswith("+00:00")):
        return ts[:10]  # the fast path: the usage log always writes UTC
    try:
        when = datetime.fromisoformat(ts)
    except ValueError:
        return None
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    return when.strftime("%Y-%m-%d")


class QuotaBook:
    """Token counts per team for the current UTC day and month."""

    def __init__(self) -> None:
        self._teams: dict[str, _TeamUsage] = {}
        # Tokens admitted requests expect to use and have not been charged yet, per team:
        # a hard quota counts them, so that requests admitted at once cannot overshoot it.
        self.held: dict[str, int] = {}
        # (team, day) -> tokens counted here and not yet handed to the shared state; None
        # while nothing shares the counts, so an embedded proxy keeps no such ledger.
        self._pending: dict[tuple[str, str], int] | None = None
        self._max_pending = MAX_PENDING
        self.dropped_unsent = 0  # tokens forgotten because the unsent ledger was full

    def add(
        self, team: str, tokens: int, when: datetime | None = None, *, shared: bool = False
    ) -> None:
        """Count `tokens` against `team` at time `when` (naive means UTC; default now);
        `shared`: counted in the shared state already (a fleet hold's release): here only."""
        utc = when.astimezone(UTC) if when is not None and when.tzinfo is not None else when
        day = today() if utc is None else utc.strftime("%Y-%m-%d")
        self._add_day(team, tokens, day)
        if self._pending is not None and tokens > 0 and not shared:
            self._remember_unsent(team, day, tokens)

    def hold(self, team: str, tokens: int) -> None:
        self.held[team] = self.held.get(team, 0) + tokens

    def release(self, team: str, tokens: int) -> None:
        left = self.held.get(team, 0) - tokens
        if left > 0:
            self.held[team] = left
        else:
            self.held.pop(team, None)

    def share(self, max_pending: int = MAX_PENDING) -> None:
        """From now on remember what `add` counts until `take_pending` hands it over."""
        if self._pending is None:
            self._pending = {}
        self._max_pending = max_pending

    def _remember_unsent(self, team: str, day: str, tokens: int) -> None:
        assert self._pending is not None
        key = (team, day)
        if key not in self._pending and len(self._pending) >= self._max_pending:
            oldest = min(self._pending, key=lambda k: k[1])  # the oldest day matters least
            self.dropped_unsent += self._pending.pop(oldest)
        self._pending[key] = self._pending.get(key, 0) + tokens

    def take_pending(self) -> dict[tuple[str, str], int]:
        """The unsent tokens per (team, day), now the caller's to deliver; the ledger empties."""
        taken = self._pending or {}
        if self._pending is not None:
            self._pending = {}
        return taken

    def unsent(self) -> int:
        """Tokens counted here that the shared state has not been handed yet."""
        return sum((self._pending or {}).values())

    def teams(self) -> list[str]:
        """Every team with a count in the current book."""
        return list(self._teams)

    def install(self, team: str, day: str, day_total: int, month_total: int) -> None:
        """Take shared totals for `day` and its month as the team's counts.

        What was counted here after those totals were read (still unsent) is added on top;
        a period older than the one the book already holds is ignored.
        """
        usage = self._teams.get(team)
        if usage is None:
            usage = self._teams[team] = _TeamUsage()
        month = day[:7]
        pending = self._pending or {}
        if month >= usage.month:
            unsent = sum(n for (t, d), n in pending.items() if t == team and d[:7] == month)
            usage.month, usage.month_used = month, month_total + unsent
        if day >= usage.day:
            usage.day, usage.day_used = day, day_total + pending.get((team, day), 0)

    def _add_day(self, team: str, tokens: int, day: str) -> None:
        usage = self._teams.get(team)
        if usage is None:
            usage = self._teams[team] = _TeamUsage()
        month = day[:7]
        if month > usage.month:  # a new month starts from zero; an older one is forgotten
            usage.month, usage.month_used = month, 0
        if month == usage.month:
            usage.month_used += tokens
        if day > usage.day:
            usage.day, usage.day_used = day, 0
        if day == usage.day:
            usage.day_used += tokens

    def used(self, team: str, now: datetime | None = None) -> tuple[int, int]:
        """(tokens today, tokens this month) for `team`, in UTC."""
        usage = self._teams.get(team)
        if usage is None:
            return 0, 0
        day = today() if now is None else now.astimezone(UTC).strftime("%Y-%m-%d")
        return (
            usage.day_used if usage.day == day else 0,
            usage.month_used if usage.month == day[:7] else 0,
        )

    def status(
        self,
        team: str,
        quotas: QuotaPolicy,
        thresholds: ThresholdPolicy,
        now: datetime | None = None,
    ) -> QuotaStatus:
        """The tighter of the daily and monthly quota: the one with the highest used/limit."""
        if quotas.daily_tokens is None and quotas.monthly_tokens is None:
            # No limits (the common case, asked on every request): today's count only.
            usage = self._teams.get(team)
            day = today() if now is None else now.astimezone(UTC).strftime("%Y-%m-%d")
            used = usage.day_used if usage is not None and usage.day == day else 0
            return QuotaStatus(used, None, Level.NORMAL, False, None)
        day_used, month_used = self.used(team, now)
        best: QuotaStatus | None = None
        best_ratio = -1.0
        for period, used, limit in (
            ("day", day_used, quotas.daily_tokens),
            ("month", month_used, quotas.monthly_tokens),
        ):
            if limit is None:
                continue
            ratio = used / limit if limit > 0 else float("inf")
            if ratio > best_ratio:
                best_ratio = ratio
                best = QuotaStatus(used, limit, level_for(ratio, thresholds), used >= limit, period)
        return best or QuotaStatus(day_used, None, Level.NORMAL, False, None)

    def rebuild(
        self,
        path: str,
        now: datetime | None = None,
        *,
        min_seek_bytes: int = _SEEK_MIN_BYTES,
        amount: Callable[[dict[str, Any]], int | None] = total_tokens_of,
    ) -> int:
        """Replace the counts with those in the log at `path`; returns the lines counted.

        The log is append-only and roughly in time order, so a large one is entered by a
        binary search at the start of the current month (less a day's margin) instead of
        being read from its first line: start-up time follows this month's traffic only.
        """
        self._teams.clear()
        now = datetime.now(UTC) if now is None else now.astimezone(UTC)
        month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        since = month_start - _SEEK_MARGIN
        cutoff = since.strftime("%Y-%m-%d")
        counted = 0
        # The period's rows may lie in files rotated out of the live one (logrotate's
        # `path.1`, `path.2.gz`): each is read, oldest first, then the live log.
        for rotated in rotated_logs(path, since.timestamp()):
            try:
                counted += self._count_file(rotated, 0, cutoff, amount)
            except (OSError, EOFError):  # unreadable or cut short: what it held is lost
                continue
        if not os.path.exists(path):
            return counted
        offset = 0
        if os.path.getsize(path) >= min_seek_bytes:
            with open(path, "rb") as f:
                offset = _first_offset_at_or_after(f, cutoff)
        return counted + self._count_file(path, offset, cutoff, amount)

    def _count_file(
        self, path: str, offset: int, cutoff: str, amount: Callable[[dict[str, Any]], int | None]
    ) -> int:
        counted = 0
        for rec in iter_records(path, offset):
            ts, team, tokens = rec.get("ts"), rec.get("team"), amount(rec)
            if not (isinstance(ts, str) and isinstance(team, str) and isinstance(tokens, int)):
                continue
            day = utc_day(ts)
            if day is None or day < cutoff:
                continue
            self._add_day(team, tokens, day)
            counted += 1
        return counted


def micro_usd_of(record: dict[str, Any]) -> int | None:
    """A usage row's cost in millionths of a dollar (what the spend book counts)."""
    cost = record.get("cost_usd")
    if not isinstance(cost, (int, float)) or isinstance(cost, bool) or not 0 <= cost < 1e9:
        return None
    return round(cost * MICRO)


def _line_day(f: BinaryIO, pos: int) -> tuple[int, str | None]:
    """(offset of the first whole line after `pos`, its UTC day or None at end of file)."""
    f.seek(pos)
    if pos:
        f.readline()  # we probably landed mid-line
    while True:
        start = f.tell()
        line = f.readline()
        if not line:
            return start, None
        try:
            ts = orjson.loads(line).get("ts")
        except (orjson.JSONDecodeError, AttributeError):
            continue
        if isinstance(ts, str) and (day := utc_day(ts)) is not None:
            return start, day


def _first_offset_at_or_after(f: BinaryIO, cutoff: str) -> int:
    """A line start before which every record's day is earlier than `cutoff`."""
    lo, hi = 0, f.seek(0, os.SEEK_END)
    while hi - lo > 4096:
        mid = (lo + hi) // 2
        # Invariant: the first record after `lo` is older than `cutoff`, and so (the log
        # being in time order) is everything before it; the first after `hi` is not.
        day = _line_day(f, mid)[1]
        if day is None or day >= cutoff:
            hi = mid
        else:
            lo = mid
    return _line_day(f, lo)[0] if lo else 0
