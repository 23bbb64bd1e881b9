"""Report: quota peaks, errors by kind, cache and cost per team, tallied while the log streams."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.policy.model import MICRO  # dollar quotas are tallied in millionths, like spend

MAX_KINDS = 30  # error kinds kept per team; a log full of odd codes cannot grow this
KIND_CHARS = 60  # an error code longer than this is cut (codes are short identifiers)
_RANK = {"normal": 0, "warning": 1, "critical": 2}


@dataclass(slots=True)
class QuotaPeak:
    """The record of a period nearest its limit: `quota_used` of `quota_limit`, worst level."""

    used: int
    limit: int
    level: str

    @property
    def share(self) -> float:
        return self.used / self.limit if self.limit > 0 else 0.0

    def merge(self, used: int, limit: int, level: str) -> None:
        if limit > 0 and (self.limit <= 0 or used / limit > self.share):
            self.used, self.limit = used, limit
        if _RANK.get(level, 0) > _RANK.get(self.level, 0):
            self.level = level


@dataclass(slots=True)
class Spend:
    """One team's day: prompt tokens, those served from cache, estimated cost and savings."""

    prompt: int = 0
    cached: int = 0
    priced: int = 0  # requests with a known price (cost and saved are sums over these)
    cost: float = 0.0
    saved: float = 0.0


@dataclass(slots=True)
class Tally:
    # (team, unit, period, UTC day or month) -> that period's peak; unit "tokens" or "usd"
    # (dollar quotas, counted here in millionths of a dollar)
    quota: dict[tuple[str, str, str, str], QuotaPeak] = field(default_factory=dict)
    errors: dict[str, dict[str, int]] = field(default_factory=dict)  # team -> kind -> count
    spend: dict[tuple[str, str], Spend] = field(default_factory=dict)  # (team, UTC day)

    def add_spend(
        self, team: str, day: str, prompt: int, cached: int, cost: float | None, saved: float
    ) -> None:
        spend = self.spend.get((team, day))
        if spend is None:
            spend = self.spend[(team, day)] = Spend()
        spend.prompt += prompt
        spend.cached += cached
        if cost is not None:
            spend.priced += 1
            spend.cost += cost
            spend.saved += saved

    def add_quota(
        self,
        team: str,
        day: str,
        used: int,
        limit: int,
        level: str,
        period: str | None = None,
        unit: str = "tokens",
    ) -> None:
        """A row's quota figures, under the period they are of: a month's row under its
        month, a day's under its day; a row that does not say (older logs) under "quota",
        by day, never folded into a month it may not have had."""
        key = (team, unit, period or "quota", day[:7] if period == "month" else day)
        peak = self.quota.get(key)
        if peak is None:
            self.quota[key] = QuotaPeak(used, limit, level)
        else:
            peak.merge(used, limit, level)

    def add_error(self, team: str, kind: str) -> None:
        kinds = self.errors.get(team)
        if kinds is None:
            kinds = self.errors[team] = {}
        if kind not in kinds and len(kinds) >= MAX_KINDS:
            kind = "other"
        kinds[kind] = kinds.get(kind, 0) + 1

    def quota_rows(self) -> list[dict[str, Any]]:
        """Per team, unit and configured period: the peak of its newest day or month, used
        vs limit (dollars for a dollar quota). Only quotas the rows were charged against
        appear: none is made up."""
        newest: dict[tuple[str, str, str], str] = {}
        for team, unit, period, when in self.quota:
            key = (team, unit, period)
            newest[key] = max(when, newest.get(key, ""))
        order = {"day": 0, "month": 1, "quota": 2}
        rows = []
        for team, unit, period in sorted(
            newest, key=lambda k: (k[0], k[1] != "tokens", order.get(k[2], 3))
        ):
            when = newest[(team, unit, period)]
            peak = self.quota[(team, unit, period, when)]
            scale = MICRO if unit == "usd" else 1
            rows.append(
                {
                    "team": team,
                    "unit": unit,
                    "period": period,
                    "when": when,
                    "used": peak.used / scale if scale > 1 else peak.used,
                    "limit": peak.limit / scale if scale > 1 else peak.limit,
                    "share": round(peak.share, 4),
                    "level": peak.level,
                }
            )
        return rows


def error_kind(status: int, error: Any) -> str | None:
    """The error's code (`upstream_timeout`), else `http_<status>`; None for a success."""
    if error is not None:
        return str(error)[:KIND_CHARS] or "error"
    return f"http_{status}" if status >= 400 else None


_MAX_COUNT = 1 << 53  # past what a float adds exactly: no usage row holds as many tokens
_PERIODS = ("day", "month")


def count_field(value: Any) -> int:
    """A row's token count or status: a whole number in [0, 2^53] (absent: 0)."""
    if value is None:
        return 0
    if type(value) is not int or not 0 <= value <= _MAX_COUNT:
        raise ValueError("count")
    return value


def amount_field(value: Any) -> float:
    """A row's dollars, milliseconds or ratio: a finite number, well inside a float."""
    if type(value) not in (int, float) or not abs(value) < 1e15:  # also NaN, inf
        raise ValueError("amount")
    return float(value)


def quota_readings(rec: dict[str, Any]) -> list[tuple[int, int, str, str | None, str]]:
    """A row's quota figures: (used, limit, level, period, unit) for its token quota and
    its dollar quota (in millionths), those it has; ValueError for a malformed one."""
    out: list[tuple[int, int, str, str | None, str]] = []
    limit, period = rec.get("quota_limit"), rec.get("quota_period")
    if limit is not None:
        out.append((
            count_field(rec.get("quota_used")), count_field(limit),
            str(rec.get("quota_level") or "normal"),
            period if period in _PERIODS else None, "tokens",
        ))  # fmt: skip
    limit, period = rec.get("spend_limit_usd"), rec.get("spend_period")
    if limit is not None:
        out.append((
            max(0, round(amount_field(rec.get("spend_usd") or 0.0) * MICRO)),
            max(1, round(amount_field(limit) * MICRO)),
            str(rec.get("spend_level") or "normal"),
            period if period in _PERIODS else None, "usd",
        ))  # fmt: skip
    return out
