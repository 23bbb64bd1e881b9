"""Usage records, warning levels, threshold crossings and the single-writer log sink."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import fields
from datetime import datetime, timedelta
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.policy.model import ThresholdPolicy
from proxy.types import Level
from proxy.usage.ledger import ThresholdWatch, UsageLog, UsageRecord, iter_records, level_for

CONTRACT_FIELDS = [
    "ts", "request_id", "team", "model", "status", "stream", "context_window", "budget",
    "tokens_before", "tokens_after", "dropped", "truncated", "summarized", "deduped",
    "prompt_tokens", "completion_tokens", "total_tokens", "usage_source", "utilization",
    "level", "quota_used", "quota_limit", "quota_level", "latency_ms", "upstream_ms", "error",
]  # fmt: skip


def record(i: int, **kw: object) -> UsageRecord:
    base: dict[str, object] = {"request_id": f"req-{i}", "team": "t", "model": "m"}
    base.update(kw)
    return UsageRecord(**base)  # type: ignore[arg-type]


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")


# --- the record -------------------------------------------------------------------------


def test_record_is_one_json_line_with_the_contract_fields() -> None:
    rec = record(1, level=Level.WARNING, quota_level=Level.CRITICAL, utilization=0.85)
    line = rec.to_json_line()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    obj = orjson.loads(line)
    assert list(obj) == [
        *CONTRACT_FIELDS,
        "kind",
        "policy",
        "cached_tokens",
        "api",
        "cost_usd",
        "saved_usd",
        "quota_period",
        "spend_usd",
        "spend_limit_usd",
        "spend_level",
        "spend_period",
        "recall_rounds",
        "recalled_tokens",
    ]
    assert [f.name for f in fields(UsageRecord)] == list(obj)
    assert obj["level"] == "warning" and obj["quota_level"] == "critical"
    assert obj["kind"] == "chat" and obj["api"] == "chat" and obj["cached_tokens"] is None
    assert obj["cost_usd"] is None and obj["saved_usd"] is None


def test_record_timestamp_is_utc_iso() -> None:
    ts = UsageRecord().ts
    assert ts.endswith("Z") and "T" in ts
    assert datetime.fromisoformat(ts).utcoffset() == timedelta(0)


def test_newlines_in_values_cannot_break_a_line() -> None:
    line = record(1, model="evil\nmodel", error="a\nb").to_json_line()
    assert line.count(b"\n") == 1


# --- levels -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("util", "level"),
    [
        (None, Level.NORMAL),
        (0.0, Level.NORMAL),
        (0.7999, Level.NORMAL),
        (0.80, Level.WARNING),
        (0.8999, Level.WARNING),
        (0.90, Level.CRITICAL),
        (1.7, Level.CRITICAL),
    ],
)
def test_level_for_default_boundaries(util: float | None, level: Level) -> None:
    assert level_for(util, ThresholdPolicy()) is level


def test_level_for_custom_thresholds() -> None:
    t = ThresholdPolicy(warning=0.5, critical=0.6)
    assert level_for(0.49, t) is Level.NORMAL
    assert level_for(0.5, t) is Level.WARNING
    assert level_for(0.6, t) is Level.CRITICAL


@given(st.floats(0, 2), st.floats(0, 2), st.floats(0.01, 1), st.floats(0, 1))
def test_level_is_monotonic_in_utilization(a: float, b: float, w: float, gap: float) -> None:
    t = ThresholdPolicy(warning=w, critical=w + gap)
    rank = {Level.NORMAL: 0, Level.WARNING: 1, Level.CRITICAL: 2}
    lo, hi = sorted((a, b))
    assert rank[level_for(lo, t)] <= rank[level_for(hi, t)]


# --- threshold crossings ----------------------------------------------------------------


def test_threshold_watch_reports_only_upward_crossings(caplog: pytest.LogCaptureFixture) -> None:
    watch = ThresholdWatch(quiet_s=0)  # every crossing logged (no quiet period)
    caplog.set_level(logging.WARNING, logger="context_proxy.usage")
    seq = [
        (Level.NORMAL, False),
        (Level.WARNING, True),
        (Level.WARNING, False),
        (Level.CRITICAL, True),
        (Level.CRITICAL, False),
        (Level.WARNING, False),
        (Level.CRITICAL, True),
        (Level.NORMAL, False),
        (Level.CRITICAL, True),
    ]
    got = [watch.observe("research", "gpt-4o", level, 0.5) for level, _ in seq]
    assert got == [expected for _, expected in seq]
    records = [r for r in caplog.records if r.name == "context_proxy.usage"]
    assert len(records) == 4
    first = records[0]
    assert first.levelno == logging.WARNING
    assert first.team == "research" and first.model == "gpt-4o"  # type: ignore[attr-defined]
    assert first.threshold == "warning" and first.utilization == 0.5  # type: ignore[attr-defined]
    assert first.getMessage() == "usage threshold crossed"  # fields apart, not escaped JSON
    critical = records[1]
    assert critical.threshold == "critical"  # type: ignore[attr-defined]
    assert critical.levelno == logging.WARNING  # a crossing is not the proxy's fault
    from proxy.server.app.logs import JsonLines

    line = orjson.loads(JsonLines().format(critical))
    assert line["level"] == "warning" and line["threshold"] == "critical"
    assert line["team"] == "research" and "{" not in line["message"]


def test_threshold_watch_keeps_teams_and_sources_apart() -> None:
    watch = ThresholdWatch()
    assert watch.observe("a", "m", Level.WARNING, 0.8)
    assert watch.observe("b", "m", Level.WARNING, 0.8)
    assert watch.observe("a", "m", Level.WARNING, 0.8, source="quota")
    assert not watch.observe("a", "m", Level.WARNING, 0.8)


# --- reading ----------------------------------------------------------------------------


def test_iter_records_skips_blank_torn_and_malformed_lines(tmp_path: Path) -> None:
    p = tmp_path / "u.jsonl"
    good = record(1).to_json_line()
    p.write_bytes(good + b"\n" + b"not json\n" + b"[1,2]\n" + good + b'{"ts":"2026-')
    assert [r["request_id"] for r in iter_records(str(p))] == ["req-1", "req-1"]


# --- the writer -------------------------------------------------------------------------


async def test_concurrent_writes_give_whole_lines(tmp_path: Path) -> None:
    p = tmp_path / "u.jsonl"
    log = UsageLog(str(p))
    await log.start()

    async def one(i: int) -> None:
        for _ in range(i % 3):
            await asyncio.sleep(0)
        # Sizes from tiny to larger than a pipe buffer, so batches are of mixed length.
        log.write(record(i, model="m" * (i * 37 % 9000)))

    await asyncio.gather(*(one(i) for i in range(600)))
    await log.aclose()
    raw = p.read_bytes()
    assert raw.endswith(b"\n")
    objs = [orjson.loads(line) for line in raw.splitlines()]
    assert sorted(o["request_id"] for o in objs) == sorted(f"req-{i}" for i in range(600))
    assert all(len(o["model"]) == int(o["request_id"][4:]) * 37 % 9000 for o in objs)
    assert log.written == 600 and log.dropped == 0


async def test_two_writers_on_one_file_do_not_interleave(tmp_path: Path) -> None:
    """Several worker processes share the log; O_APPEND keeps their lines apart."""
    p = tmp_path / "u.jsonl"
    a, b = UsageLog(str(p)), UsageLog(str(p))
    await a.start()
    await b.start()
    for i in range(400):
        (a if i % 2 else b).write(record(i, model="x" * (i * 101 % 20000)))
        if i % 50 == 0:
            await asyncio.sleep(0.001)
    await asyncio.gather(a.aclose(), b.aclose())
    ids = [orjson.loads(line)["request_id"] for line in p.read_bytes().splitlines()]
    assert sorted(ids) == sorted(f"req-{i}" for i in range(400))


async def test_lines_reach_the_file_before_close(tmp_path: Path) -> None:
    p = tmp_path / "u.jsonl"
    log = UsageLog(str(p))
    await log.start()
    log.write(record(1))
    deadline = time.monotonic() + 10  # generous: this checks flushing, not speed
    while not p.read_bytes() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert orjson.loads(p.read_bytes())["request_id"] == "req-1"
    await log.aclose()


async def test_flush_waits_for_the_lines_queued_so_far(tmp_path: Path) -> None:
    p = tmp_path / "u.jsonl"
    log = UsageLog(str(p))
    await log.start()
    for i in range(2000):
        log.write(record(i))
    await log.flush()
    assert len(p.read_bytes().splitlines()) == 2000
    await log.aclose()


async def test_aclose_flushes_everything_queued(tmp_path: Path) -> None:
    p = tmp_path / "u.jsonl"
    log = UsageLog(str(p))
    for i in range(50):  # queued before start: still written
        log.write(record(i))
    await log.start()
    for i in range(50, 3000):
        log.write(record(i))
    await log.aclose()
    assert len(p.read_bytes().splitlines()) == 3000


async def test_write_after_close_or_on_a_full_queue_never_raises(tmp_path: Path) -> None:
    log = UsageLog(str(tmp_path / "u.jsonl"), max_queue=1)
    log.write(record(1))
    log.write(record(2))  # the queue holds one: dropped, not raised
    assert log.dropped == 1
    await log.aclose()
    log.write(record(3))
    assert log.dropped == 2
    assert len((tmp_path / "u.jsonl").read_bytes().splitlines()) == 1


async def test_a_failing_write_is_counted_retried_and_the_writer_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "u.jsonl"
    log = UsageLog(str(p))
    await log.start()
    real_write = os.write
    fail = {"left": 1}

    def flaky(fd: int, data: bytes | memoryview) -> int:
        if fail["left"]:
            fail["left"] -= 1
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr("proxy.usage.writer.os.write", flaky)
    log.write(record(1))
    while log.write_failures == 0:
        await asyncio.sleep(0.01)
    assert log.failing and log.backlog == 1
    log.write(record(2))
    await log.aclose()
    # The failed row was kept and written with the next one, in order.
    got = [orjson.loads(x)["request_id"] for x in p.read_bytes().splitlines()]
    assert got == ["req-1", "req-2"] and log.dropped == 0 and not log.failing


async def test_stdout_mode(capfd: pytest.CaptureFixture[str]) -> None:
    log = UsageLog("-")
    await log.start()
    for i in range(3):
        log.write(record(i))
    await log.aclose()
    out = capfd.readouterr().out
    assert [orjson.loads(x)["request_id"] for x in out.splitlines()] == ["req-0", "req-1", "req-2"]


async def test_a_torn_last_line_is_terminated_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p = tmp_path / "u.jsonl"
    whole = record(0).to_json_line()
    p.write_bytes(whole + b'{"ts":"2026-11-01T10:0')
    log = UsageLog(str(p))
    await log.start()
    log.write(record(1))
    await log.aclose()
    lines = lines_of(p)
    assert lines[:2] == [whole[:-1], b'{"ts":"2026-11-01T10:0'] and lines[3:] == [b""]
    assert orjson.loads(lines[2])["request_id"] == "req-1"
    assert [r["request_id"] for r in iter_records(str(p))] == ["req-0", "req-1"]
    assert "torn" in caplog.text


async def test_a_whole_file_is_left_as_it_is(tmp_path: Path) -> None:
    p = tmp_path / "u.jsonl"
    whole = record(0).to_json_line()
    p.write_bytes(whole)
    log = UsageLog(str(p))
    await log.start()
    await log.aclose()
    assert p.read_bytes() == whole


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from proxy.usage.ledger import UsageLog, UsageRecord

    async def main():
        log = UsageLog(sys.argv[1])
        await log.start()
        i = 0
        while True:
            for _ in range(200):
                log.write(UsageRecord(request_id=f"k{i}", model="m" * (i % 5000)))
                i += 1
            await asyncio.sleep(0)

    asyncio.run(main())
    """
)


async def test_sigkill_leaves_only_whole_lines_after_restart(tmp_path: Path) -> None:
    p = tmp_path / "u.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(p)], cwd=Path(__file__).resolve().parents[2]
    )
    try:
        deadline = time.monotonic() + 30
        while (not p.exists() or p.stat().st_size < 2_000_000) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert p.exists() and p.stat().st_size >= 2_000_000, "the writer produced nothing"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    log = UsageLog(str(p))
    await log.start()
    log.write(record(999_999))
    await log.aclose()
    lines = p.read_bytes().split(b"\n")
    assert lines[-1] == b""
    bad = [line for line in lines[:-1] if line and not _parses(line)]
    assert len(bad) <= 1  # at most the one line the kill cut short, now on its own line
    assert orjson.loads(lines[-2])["request_id"] == "req-999999"
    assert sum(1 for _ in iter_records(str(p))) == len(lines) - 1 - len(bad)


def _parses(line: bytes) -> bool:
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True


def test_threshold_log_line_is_not_repeated_while_a_team_flaps(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [0.0]
    watch = ThresholdWatch(quiet_s=300, clock=lambda: clock[0])
    th = ThresholdPolicy()
    with caplog.at_level(logging.WARNING, logger="context_proxy.usage"):
        crossings = 0
        for _ in range(10):  # small, large, small, large...
            crossings += watch.observe("t", "m", level_for(0.1, th), 0.1)
            crossings += watch.observe("t", "m", level_for(0.95, th), 0.95)
        assert crossings == 10  # every crossing still counts (the metric)
        assert len(caplog.records) == 1
        clock[0] = 301.0
        watch.observe("t", "m", Level.NORMAL, 0.1)
        assert watch.observe("t", "m", Level.CRITICAL, 0.95)
        assert len(caplog.records) == 2
