"""Report: the `report` command, totals per group streamed from the usage log."""

from __future__ import annotations

import argparse
import math
import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import orjson

from proxy.report import dashboard, sources
from proxy.report.format import format_csv, format_json, format_table
from proxy.report.options import GROUP_KEYS, add_report_arguments, parse_since

__all__ = ["GROUP_KEYS", "add_report_arguments", "aggregate", "parse_since", "report_main", "run"]
from proxy.report.tally import Tally, error_kind, quota_readings
from proxy.report.tally import amount_field as _amount
from proxy.report.tally import count_field as _count

UTIL_BIN = 0.05  # utilization histogram bin width
RATE_LIMITED = "rate_limit_exceeded"  # a usage row's error when a rate limit refused it
UTIL_BINS = 31  # 0 .. 1.5 in steps of 0.05, the last bin holds everything from 1.5 up
# (the dashboard labels that bin "≥ 1.5" with its count and the highest value seen)
# fmt: off
_SUMMED = (
    "requests", "errors", "prompt_tokens", "completion_tokens", "total_tokens", "trimmed",
    "tokens_removed", "refused", "refused_tokens", "rate_limited", "warnings", "critical",
    "cached_tokens", "priced", "cost_usd", "saved_usd",
)
# fmt: on


@dataclass(slots=True)
class GroupStats:
    requests: int = 0
    errors: int = 0  # status >= 400 or an error recorded
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    trimmed: int = 0  # requests sent upstream trimmed (a refused one was never sent)
    tokens_removed: int = 0  # from the requests sent
    refused: int = 0  # refused by the proxy because they could not fit (never sent)
    refused_tokens: int = 0  # their tokens before trimming
    rate_limited: int = 0  # refused for a rate limit (requests or tokens per minute)
    warnings: int = 0  # rows at level warning
    critical: int = 0  # rows at level critical
    cached_tokens: int = 0  # prompt tokens the upstream served from its cache
    priced: int = 0  # requests with a cost (a model with a known price)
    cost_usd: float = 0.0
    saved_usd: float = 0.0
    latencies: array[float] = field(default_factory=lambda: array("d"))  # 8 bytes a request

    def row(self) -> dict[str, Any]:
        ordered = sorted(self.latencies)
        return {
            "requests": self.requests,
            "errors": self.errors,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "trimmed": self.trimmed,
            "trimmed_share": round(self.trimmed / self.requests, 4) if self.requests else 0.0,
            "tokens_removed": self.tokens_removed,
            "refused": self.refused,
            "refused_tokens": self.refused_tokens,
            "rate_limited": self.rate_limited,
            "warnings": self.warnings,
            "critical": self.critical,
            "p50_ms": percentile(ordered, 0.50),
            "p95_ms": percentile(ordered, 0.95),
            "cached_tokens": self.cached_tokens,
            "cached_share": share(self.cached_tokens, self.prompt_tokens),
            # null, not 0, when no request of the group had a known price
            "cost_usd": round(self.cost_usd, 6) if self.priced else None,
            "saved_usd": round(self.saved_usd, 6) if self.priced else None,
        }


def share(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole > 0 else 0.0


def percentile(ordered: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of an already sorted sequence; None when it is empty."""
    if not ordered:
        return None
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 3)


@dataclass(slots=True)
class Aggregate:
    by: tuple[str, ...]
    groups: dict[tuple[str, ...], GroupStats] = field(default_factory=dict)
    day_team_tokens: dict[str, dict[str, int]] = field(default_factory=dict)
    model_tokens: dict[str, int] = field(default_factory=dict)
    util_hist: list[int] = field(default_factory=lambda: [0] * UTIL_BINS)
    util_max: float = 0.0
    tally: Tally = field(default_factory=Tally)  # quota peaks and errors by kind
    lines: int = 0  # records counted
    skipped: int = 0  # malformed or torn lines

    def rows(self) -> list[dict[str, Any]]:
        return [
            {**dict(zip(self.by, key, strict=True)), **stats.row()}
            for key, stats in sorted(self.groups.items())
        ]

    def total(self) -> dict[str, Any]:
        total = GroupStats()
        for s in self.groups.values():
            for name in _SUMMED:
                setattr(total, name, getattr(total, name) + getattr(s, name))
            total.latencies.extend(s.latencies)
        return total.row()


def aggregate(
    lines: Iterable[bytes], by: Sequence[str], since: str | None = None, until: str | None = None
) -> Aggregate:
    """Sum the records in `lines` per group of `by` fields, plus the dashboard's series."""
    agg = Aggregate(tuple(by))
    groups, day_team, models = agg.groups, agg.day_team_tokens, agg.model_tokens
    # Our writer puts `ts` first: lines before `since` are skipped without parsing them.
    since_b = None if since is None else since.encode()
    for line in lines:
        if since_b is not None and line.startswith(b'{"ts":"') and line[7:26] < since_b:
            continue
        try:  # read everything first, so a bad field skips the whole line, not half of it
            rec = orjson.loads(line)
            ts = rec["ts"]
            if not isinstance(ts, str):
                raise TypeError("ts")
            day = ts[:10]
            if (since is not None and ts < since) or (until is not None and ts >= until):
                continue
            key = tuple([_group_value(rec, k, ts) for k in by])
            total = _count(rec.get("total_tokens"))
            prompt = _count(rec.get("prompt_tokens"))
            completion = _count(rec.get("completion_tokens"))
            before = _count(rec.get("tokens_before"))
            removed = before - _count(rec.get("tokens_after"))
            cached = _count(rec.get("cached_tokens"))
            cost, saved = rec.get("cost_usd"), rec.get("saved_usd")
            cost, saved = (None, 0.0) if cost is None else (_amount(cost), _amount(saved or 0.0))
            status = _count(rec.get("status"))
            error = status >= 400 or rec.get("error") is not None
            # Sent: it reached the upstream (a time there, or an answer). Only what was sent
            # can have been trimmed or saved anything; one refused for length is apart.
            sent = rec.get("upstream_ms") is not None or not error
            refused = not sent and rec.get("error") in REFUSED_FOR_LENGTH
            saved = saved if sent else 0.0  # never sent: it saved nothing
            latency = _amount(rec.get("latency_ms") or 0.0)
            util_given = rec.get("utilization")
            util = None if util_given is None else _amount(util_given)
            util_bin = None if util is None else min(max(int(util / UTIL_BIN), 0), UTIL_BINS - 1)
            level, team, model = rec.get("level"), str(rec.get("team")), str(rec.get("model"))
            if level not in _LEVELS:
                raise ValueError("level")
            kind = error_kind(status, rec.get("error"))
            quotas = quota_readings(rec)
        except (orjson.JSONDecodeError, LookupError, TypeError, ValueError, AttributeError):
            agg.skipped += 1  # a torn or hand-made line: said in the report, never fatal
            continue
        stats = groups.get(key)
        if stats is None:
            stats = groups[key] = GroupStats()
        stats.requests += 1
        stats.errors += error
        stats.prompt_tokens += prompt
        stats.completion_tokens += completion
        stats.total_tokens += total
        if sent and (
            removed > 0
            or rec.get("dropped")
            or rec.get("truncated")
            or rec.get("deduped")
            or (rec.get("summarized"))
        ):
            stats.trimmed += 1
            stats.tokens_removed += max(removed, 0)
        if refused:
            stats.refused += 1
            stats.refused_tokens += before
        stats.rate_limited += rec.get("error") == RATE_LIMITED
        stats.warnings += level == "warning"  # apart: a critical row is not also a warning
        stats.critical += level == "critical"
        stats.latencies.append(latency)
        stats.cached_tokens += cached
        if cost is not None:
            stats.priced += 1
            stats.cost_usd += cost
            stats.saved_usd += saved
        agg.tally.add_spend(team, day, prompt, cached, cost, saved)
        per_team = day_team.setdefault(day, {})
        per_team[team] = per_team.get(team, 0) + total
        name = model if model and not error else FAILED  # failures apart from the models
        models[name] = models.get(name, 0) + total
        if util_bin is not None and util is not None:
            agg.util_hist[util_bin] += 1
            agg.util_max = max(agg.util_max, util)
        if kind is not None:
            agg.tally.add_error(team, kind)
        for used, limit, quota_level, period, unit in quotas:
            agg.tally.add_quota(team, day, used, limit, quota_level, period, unit)
        agg.lines += 1
    return agg


_LEVELS = (None, "normal", "warning", "critical")
# The proxy's refusals of a request that cannot fit (usage rows' `error`).
REFUSED_FOR_LENGTH = frozenset({"context_length_exceeded"})
FAILED = "(failed requests)"


def _group_value(rec: dict[str, Any], key: str, ts: str) -> str:
    if key == "day":
        return ts[:10]
    if key == "month":
        return ts[:7]
    value = rec.get(key)
    if value is None and key == "api":
        return "chat"  # rows from before the Responses API: all chat completions
    return "" if value is None else str(value)


def run(args: argparse.Namespace) -> int:
    """Execute `report` from parsed arguments."""
    return report_main(
        args.usage_log,
        args.by,
        args.since,
        html=args.html,
        fmt=args.fmt,
        out=args.out,
        until=args.until,
        policies=args.policies,
    )


def report_main(
    path: str | Sequence[str],
    by: Sequence[str] = ("team",),
    since: str | None = None,
    *,
    html: str | None = None,
    fmt: str = "table",
    out: str | None = None,
    until: str | None = None,
    stdout: TextIO | None = None,
    policies: str | None = None,
) -> int:
    """Print totals per group of the logs `path` names (paths, globs, .gz: sources.py);
    0 on success, 1 if one is unreadable or a glob matches nothing."""
    stdout = sys.stdout if stdout is None else stdout
    paths, empty = sources.expand([path] if isinstance(path, str) else path)
    for pattern in empty:
        print(f"context-proxy report: no file matches {pattern}", file=sys.stderr)
    if empty or not paths:
        return 1
    try:
        agg = aggregate(sources.lines(paths), by, since, until)
    except (OSError, EOFError) as exc:  # EOFError: a gzip file cut short
        print(f"context-proxy report: cannot read {', '.join(paths)}: {exc}", file=sys.stderr)
        return 1
    rows, total = agg.rows(), agg.total()
    if fmt == "csv":
        text = format_csv(agg.by, rows)
    elif fmt == "json":
        text = format_json(agg.by, rows, total, agg.skipped)
    else:
        text = format_table(agg.by, rows, total)
    if agg.skipped:
        print(f"context-proxy report: skipped {agg.skipped} malformed lines", file=sys.stderr)
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        stdout.write(text)
    if html:
        thresholds = dashboard.team_thresholds(policies)
        page = dashboard.render_page(agg, ", ".join(paths), rows, total, thresholds, UTIL_BIN)
        with open(html, "w", encoding="utf-8") as f:
            f.write(page)
        print(f"context-proxy report: wrote {html}", file=sys.stderr)
    return 0
