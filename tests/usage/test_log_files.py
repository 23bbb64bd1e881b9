"""Usage logs as they lie on disk: rotated files of the period read back (quotas survive
logrotate and a restart), and no line held past its bound, plain or gzipped."""

from __future__ import annotations

import gzip
import io
import os
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path

import orjson

from proxy.report.sources import lines
from proxy.usage.log_files import MAX_LINE_BYTES, bounded_lines, rotated_logs
from proxy.usage.quotas import QuotaBook, micro_usd_of

NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)


def row(day: str, tokens: int, cost: float = 0.0) -> bytes:
    record = {"ts": f"2026-11-{day}T10:00:00Z", "team": "a", "total_tokens": tokens,
              "cost_usd": cost}  # fmt: skip
    return orjson.dumps(record) + b"\n"


def test_a_restart_after_logrotate_counts_the_rotated_files_of_the_month(tmp_path: Path) -> None:
    """logrotate moved the month's first rows to usage.jsonl.1 and gzipped older ones: the
    monthly token and dollar counts are rebuilt from all of them, not the live file alone."""
    live = tmp_path / "usage.jsonl"
    (tmp_path / "usage.jsonl.2.gz").write_bytes(gzip.compress(row("02", 100, 1.0)))
    (tmp_path / "usage.jsonl.1").write_bytes(row("10", 200, 2.0))
    live.write_bytes(row("20", 300, 3.0))
    old = tmp_path / "usage.jsonl.3.gz"  # last written in September: not read
    old.write_bytes(gzip.compress(row("01", 10_000)))
    september = datetime(2026, 9, 30, tzinfo=UTC).timestamp()
    os.utime(old, (september, september))
    (tmp_path / "usagejsonl.bak").write_bytes(row("05", 7))  # another file: not the log's
    tokens, spend = QuotaBook(), QuotaBook()
    assert tokens.rebuild(str(live), NOW) == 3
    assert tokens.used("a", NOW) == (300, 600)
    spend.rebuild(str(live), NOW, amount=micro_usd_of)
    assert spend.used("a", NOW) == (3_000_000, 6_000_000)


def test_rotated_logs_are_found_oldest_first(tmp_path: Path) -> None:
    live = tmp_path / "usage.jsonl"
    for age, name in (
        (30, "usage.jsonl-20261101.gz"),
        (20, "usage.jsonl.1"),
        (10, "usage.jsonl_x"),
    ):
        path = tmp_path / name
        path.write_bytes(b"")
        os.utime(path, (time.time() - age, time.time() - age))
    found = [Path(p).name for p in rotated_logs(str(live), 0)]
    assert found == ["usage.jsonl-20261101.gz", "usage.jsonl.1", "usage.jsonl_x"]


def test_an_overlong_line_is_skipped_without_being_held() -> None:
    big = b"x" * (3 * MAX_LINE_BYTES) + b"\n"
    data = b'{"a":1}\n' + big + b'{"b":2}\n' + b"tail"
    assert list(bounded_lines(io.BytesIO(data))) == [b'{"a":1}\n', b'{"b":2}\n', b"tail"]


def test_a_gzipped_log_of_one_huge_line_is_read_in_bounded_pieces(tmp_path: Path) -> None:
    """0.5 MB of gzip holding one 512 MB line: report's reader skips it in pieces of a
    megabyte, never the whole line (what Python allocates is traced)."""
    packed = tmp_path / "huge.jsonl.gz"
    with gzip.open(packed, "wb", compresslevel=9) as f:
        chunk = b"a" * (1 << 20)
        for _ in range(512):
            f.write(chunk)
        f.write(b"\n" + row("20", 5))
    assert packed.stat().st_size < 1_000_000
    tracemalloc.start()
    try:
        assert list(lines([str(packed)])) == [row("20", 5)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * MAX_LINE_BYTES, peak
