"""The figures of a fleet soak (tests/fleet_soak.py) and what must hold of them.

- every answer has exactly one usage row, matched by request id (none duplicated; none
  lost, bar answers a SIGKILL cut within a second of their end: rows are written ~50 ms
  after an answer);
- each team's counters in Redis (tokens, and spend) are at least what its rows charged,
  after Redis was restarted empty three times (a SIGKILLed replica's last second excused:
  its unsent counts die with it), and at most 1% over;
- a hard quota spent early is overshot by at most one request;
- a rate limit admits what its bucket allows over the run (a minute's worth, and the
  refill), whatever the outages;
- Redis and each replica recover (times reported); SIGTERM exits 0;
- RSS of every replica that lived 20 s grows less than 30 MB after its warm-up;
- /healthz answers 200 on every probe of a replica that is up, p99 under 2 s (the event
  loop is never held for seconds: a generous bound, the figures go to the benchmark).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tests.fleet_soak import CAPPED_TOKENS, RATED_PER_MINUTE, RECOVERY_LIMIT_S, Soak
from tests.state.fleet import charged, charged_micro_usd, periods

KILL_GRACE_S = 1.0
MAX_RSS_GROWTH_MB = 30.0
MAX_HEALTHZ_P99_S = 2.0


@dataclass(frozen=True)
class Check:
    name: str
    measured: str
    met: bool


def _ts(row: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(row["ts"]).replace("Z", "+00:00")).timestamp()


def judge(soak: Soak) -> tuple[list[Check], dict[str, Any]]:
    """The checks, and every figure measured (for the benchmark's JSON)."""
    rows = soak.fleet.rows()
    checks: list[Check] = []
    figures: dict[str, Any] = {"requests": len(soak.outcomes)}
    figures["statuses"] = dict(Counter(str(o.status) for o in soak.outcomes).most_common())

    ids = Counter(str(r.get("request_id")) for r in rows)
    duplicated = sum(n - 1 for n in ids.values() if n > 1)

    def excused(replica: str, ended: float) -> bool:
        killed = soak.kills.get(replica)
        return killed is not None and ended > killed - KILL_GRACE_S

    answered = [o for o in soak.outcomes if o.request_id]
    lost = [o for o in answered if o.request_id not in ids and not excused(o.replica, o.t1)]
    unanswered = len(set(ids) - {o.request_id for o in answered})
    figures.update(rows=len(rows), answered=len(answered), lost=len(lost))
    figures.update(duplicated=duplicated, rows_without_answer=unanswered)
    checks.append(Check(
        "one usage row per answer, by request id",
        f"{len(rows):,} rows, {len(answered):,} answers: {len(lost)} lost, {duplicated} "
        f"duplicated ({unanswered} rows of requests whose client got no answer)",
        not lost and not duplicated,
    ))  # fmt: skip

    # What a SIGKILLed replica booked in its last second may never have reached Redis.
    cut = {
        r.get("request_id")
        for who, at in soak.kill_walls.items()
        for r in soak.processes[who].rows()
        if _ts(r) > at - KILL_GRACE_S
    }
    kept = [r for r in rows if r.get("request_id") not in cut]
    for period in periods(rows):
        for team, prefix, measure in (
            ("plain", "cp:quota:", charged),
            ("held", "cp:quota:", charged),
            ("held", "cp:spend:", charged_micro_usd),
        ):
            counter = soak.fleet.counter(team, prefix, period)
            floor, ceiling = measure(kept, team, period), measure(rows, team, period)
            figures[f"counter {prefix}{team} {period}"] = [counter, floor, ceiling]
            what = "spend" if "spend" in prefix else "tokens"
            checks.append(Check(
                f"{team}'s {what} in Redis ({period}) >= its rows",
                f"{counter:,} counted, rows {ceiling:,} ({floor:,} without the killed "
                "replica's last second)",
                floor <= counter <= max(ceiling * 1.01, ceiling + 36),
            ))  # fmt: skip

    by_day: dict[str, list[int]] = {}
    for r in rows:
        if r.get("team") == "capped":
            by_day.setdefault(str(r["ts"])[:10], []).append(int(r.get("total_tokens") or 0))
    refused = sum(1 for r in rows if r.get("team") == "capped" and r.get("status") == 429)
    spent = {day: (sum(used), max(used)) for day, used in by_day.items()}
    figures.update(capped_spent=spent, capped_refused=refused)
    checks.append(Check(
        "hard quota overshoot within one request",
        "; ".join(f"{day}: {total:,} of {CAPPED_TOKENS:,} ({total - CAPPED_TOKENS:+,}; one "
                  f"request {one})" for day, (total, one) in spent.items())
        + f"; {refused:,} refused",
        all(total <= CAPPED_TOKENS + one for total, one in spent.values()) and refused > 0,
    ))  # fmt: skip

    rated = [r for r in rows if r.get("team") == "rated"]
    admitted = sum(1 for r in rated if r.get("status") != 429)
    allowed = RATED_PER_MINUTE * (1 + soak.duration_s / 60)
    figures.update(rated_admitted=admitted, rated_allowed=allowed, rated_sent=len(rated))
    checks.append(Check(
        "rate limit admits what its bucket allows",
        f"{admitted:,} admitted of {len(rated):,} (the bucket allows {allowed:,.0f})",
        0.8 * allowed <= admitted <= allowed + 3,
    ))  # fmt: skip

    redis_s, replica_s = soak.redis_recovery_s, soak.replica_recovery_s
    figures.update(redis_recovery_s=redis_s, replica_recovery_s=replica_s, exits=soak.exits)
    checks.append(Check(
        "recovery after Redis and after a replica restart",
        f"Redis {', '.join(f'{s:.2f}' for s in redis_s)} s; replicas "
        f"{', '.join(f'{s:.1f}' for s in replica_s)} s; SIGTERM exits {sorted(soak.exits.values())}",
        len(redis_s) == 3 and max(redis_s) < RECOVERY_LIMIT_S and set(soak.exits.values()) == {0},
    ))  # fmt: skip

    growth = {}
    for who, samples in soak.rss.items():
        if len(samples) >= 20:
            warm = samples[len(samples) // 4][1]
            growth[who] = (warm, samples[-1][1])
    worst = max(growth.items(), key=lambda g: g[1][1] - g[1][0], default=None)
    figures["rss_mb"] = growth
    checks.append(Check(
        f"RSS growth after warm-up < {MAX_RSS_GROWTH_MB:g} MB",
        "; ".join(f"{w}: {a:.1f} -> {b:.1f} MB ({(b - a) / a:+.1%})" for w, (a, b) in growth.items()),
        worst is not None and worst[1][1] - worst[1][0] < MAX_RSS_GROWTH_MB,
    ))  # fmt: skip

    latencies = sorted(p[2] for p in soak.probes if p[3] == 200)
    failed = sum(1 for p in soak.probes if p[3] != 200)
    p50 = statistics.median(latencies) if latencies else 0.0
    p99 = latencies[int(0.99 * (len(latencies) - 1))] if latencies else 0.0
    figures.update(healthz_probes=len(soak.probes), healthz_failed=failed)
    figures.update(healthz_p50_ms=p50 * 1000, healthz_p99_ms=p99 * 1000)
    checks.append(Check(
        "/healthz under load",
        f"{len(soak.probes):,} probes, {failed} failed; p50 {p50 * 1000:.1f} ms, "
        f"p99 {p99 * 1000:.1f} ms, max {max(latencies, default=0) * 1000:.0f} ms",
        failed == 0 and len(latencies) > 0 and p99 < MAX_HEALTHZ_P99_S,
    ))  # fmt: skip
    return checks, figures


def table(checks: list[Check]) -> str:
    lines = ["| check | measured | met |", "|---|---|---|"]
    lines += [f"| {c.name} | {c.measured} | {'yes' if c.met else '**no**'} |" for c in checks]
    return "\n".join(lines)
