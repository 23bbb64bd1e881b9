"""Benchmark: the report, the quota rebuild and the log writer on a million-line usage log.

Run: /work/venv/bin/python tests/bench/bench_report.py [LINES]
"""

from __future__ import annotations

import asyncio
import io
import os
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from proxy.report.totals import parse_since, report_main
from proxy.types import Level
from proxy.usage.ledger import UsageLog, UsageRecord
from proxy.usage.quotas import QuotaBook

TEAMS = [f"team-{i}" for i in range(12)]
MODELS = [f"model-{i}" for i in range(40)]


def generate(path: str, n: int) -> None:
    """`n` records spread over 90 days, ending now, written in time order."""
    rnd = random.Random(5)
    end = datetime.now(UTC)
    start = end - timedelta(days=90)
    step = (end - start) / n
    with open(path, "wb", buffering=1 << 20) as f:
        for i in range(n):
            before = rnd.randint(100, 120_000)
            budget = 100_000
            util = before / budget
            after = min(before, budget)
            level = (
                Level.CRITICAL if util >= 0.9 else Level.WARNING if util >= 0.8 else Level.NORMAL
            )
            ts = (start + step * i).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            f.write(
                UsageRecord(
                    ts=ts, request_id=f"{i:016x}", team=rnd.choice(TEAMS), model=rnd.choice(MODELS),
                    status=200, context_window=128_000, budget=budget, tokens_before=before,
                    tokens_after=after, dropped=int(before > after), prompt_tokens=after,
                    completion_tokens=500, total_tokens=after + 500, usage_source="upstream",
                    utilization=util, level=level, latency_ms=rnd.uniform(5, 9000),
                    upstream_ms=rnd.uniform(4, 8900),
                ).to_json_line()
            )  # fmt: skip


def timed(label: str, fn: object, rows: list[tuple[str, float, str]], note: str = "") -> None:
    t0 = time.perf_counter()
    result = fn()  # type: ignore[operator]
    rows.append((label, time.perf_counter() - t0, note or str(result)))


async def write_through_log(path: str, n: int) -> None:
    log = UsageLog(path)
    await log.start()
    rec = UsageRecord(team="t", model="m", total_tokens=1)
    for i in range(n):
        log.write(rec)
        if i % 1000 == 0:
            await asyncio.sleep(0)  # let the writer run, as between requests
    await log.aclose()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "usage.jsonl")
        rows: list[tuple[str, float, str]] = []
        timed(f"generate {n:,} lines", lambda: generate(log, n), rows, "")
        size = os.path.getsize(log)
        rows[-1] = (rows[-1][0], rows[-1][1], f"{size / 2**20:.0f} MiB")
        sink = io.StringIO()
        timed("report --by team", lambda: report_main(log, ["team"], stdout=sink), rows)
        timed(
            "report --by team,model,day",
            lambda: report_main(log, ["team", "model", "day"], stdout=sink),
            rows,
        )
        timed(
            "report --since 7d",
            lambda: report_main(log, ["team"], parse_since("7d"), stdout=sink),
            rows,
        )
        html = os.path.join(tmp, "r.html")
        timed(
            "report --by team,model --html",
            lambda: report_main(log, ["team", "model"], html=html, stdout=sink),
            rows,
        )
        rows[-1] = (rows[-1][0], rows[-1][1], f"page {os.path.getsize(html) / 1024:.0f} KiB")
        timed("quota rebuild (seek to month)", lambda: QuotaBook().rebuild(log), rows)
        rows[-1] = (rows[-1][0], rows[-1][1], f"{rows[-1][2]} lines counted")
        timed(
            "quota rebuild (full scan)",
            lambda: QuotaBook().rebuild(log, min_seek_bytes=1 << 60),
            rows,
        )
        rows[-1] = (rows[-1][0], rows[-1][1], f"{rows[-1][2]} lines counted")
        out = os.path.join(tmp, "w.jsonl")
        writes = min(n, 200_000)
        timed(
            f"UsageLog: {writes:,} writes + aclose",
            lambda: asyncio.run(write_through_log(out, writes)),
            rows,
            "",
        )
        per = rows[-1][1] / writes * 1e6
        rows[-1] = (rows[-1][0], rows[-1][1], f"{per:.1f} us/record")
    width = max(len(r[0]) for r in rows)
    print(f"{'step':<{width}}  {'seconds':>8}  note")
    for label, secs, note in rows:
        print(f"{label:<{width}}  {secs:>8.2f}  {note}")


if __name__ == "__main__":
    main()
