"""Hot path: the usage writer's batched wake-ups, and per-request bookkeeping
without a datetime per call, each keeping what it computes."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

import orjson

from proxy.policy.model import QuotaPolicy, ThresholdPolicy
from proxy.types import Level
from proxy.usage import quotas as quotas_module
from proxy.usage.ledger import UsageLog, UsageRecord, utc_now_iso
from proxy.usage.quotas import QuotaBook, QuotaStatus


class CountingEvent(threading.Event):
    """A threading.Event that counts how often it is set (each set wakes the writer)."""

    def __init__(self) -> None:
        super().__init__()
        self.sets = 0

    def set(self) -> None:
        self.sets += 1
        super().set()


def rows(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line]


def wait_for(predicate: object, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_requests_on_the_loop_wake_the_writer_once_per_interval(tmp_path: Path) -> None:
    """Before: each record written between two loop steps woke the writer thread (a
    futex and a GIL hand-off per request); now one timer wakes it for all of them."""
    path = tmp_path / "usage.jsonl"

    async def main() -> int:
        log = UsageLog(str(path))
        event = log._wakeup = CountingEvent()  # before start: the writer waits on it
        await log.start()
        for i in range(50):
            log.write(UsageRecord(request_id=f"r{i}"))
            await asyncio.sleep(0)  # the loop runs its callbacks between two requests
            await asyncio.sleep(0.001)  # and the writer gets the GIL
        sets = event.sets
        # No flush: the timer alone brings the rows to the file, within its interval.
        assert await asyncio.to_thread(wait_for, lambda: len(rows(path)) == 50)
        await log.aclose()
        return sets

    sets = asyncio.run(main())
    assert sets <= 3, f"the writer was woken {sets} times for 50 records"
    assert [r["request_id"] for r in rows(path)] == [f"r{i}" for i in range(50)]


def test_batched_rows_are_written_by_aclose_and_flush(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"

    async def main() -> None:
        log = UsageLog(str(path))
        await log.start()
        log.write(UsageRecord(request_id="a"))
        await log.flush()  # at once, not after the wake-up interval
        assert [r["request_id"] for r in rows(path)] == ["a"]
        log.write(UsageRecord(request_id="b"))
        await log.aclose()  # shutdown (SIGTERM too) writes what waits for the timer

    asyncio.run(main())
    assert [r["request_id"] for r in rows(path)] == ["a", "b"]


def test_a_timer_left_on_a_stopped_loop_does_not_hold_rows_back(tmp_path: Path) -> None:
    """A wake-up scheduled on a loop that then stopped never fires: the next write,
    from another loop, notices it is overdue and wakes the writer itself."""
    path = tmp_path / "usage.jsonl"
    log = UsageLog(str(path))

    async def first() -> None:
        await log.start()
        log.write(UsageRecord(request_id="first"))

    asyncio.run(first())  # the loop ends before its timer fires
    log._wake_by = time.monotonic() - 1  # as if the interval and its margin had passed

    async def second() -> None:
        log.write(UsageRecord(request_id="second"))
        assert await asyncio.to_thread(wait_for, lambda: len(rows(path)) == 2, 2.0)
        await log.aclose()

    asyncio.run(second())
    assert [r["request_id"] for r in rows(path)] == ["first", "second"]


def test_a_full_batch_wakes_the_writer_at_once(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"

    async def main() -> None:
        log = UsageLog(str(path))
        event = log._wakeup = CountingEvent()  # not started: the queue only grows
        for i in range(600):
            log.write(UsageRecord(request_id=f"r{i}"))
        assert event.sets >= 1  # at the 512th row, without waiting for the timer

    asyncio.run(main())


def test_utc_now_iso_formats_without_a_datetime_per_call() -> None:
    with mock.patch("proxy.usage.record.datetime", wraps=datetime) as dt:
        first = utc_now_iso()
        for _ in range(100):
            utc_now_iso()
    assert dt.fromtimestamp.call_count <= 3  # once per second, not per row
    assert not dt.now.called
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first)
    parsed = datetime.fromisoformat(first.replace("Z", "+00:00"))
    assert abs((datetime.now(UTC) - parsed).total_seconds()) < 2


def test_quota_add_and_status_without_limits_need_no_datetime() -> None:
    book = QuotaBook()
    no_limits, thresholds = QuotaPolicy(), ThresholdPolicy()
    with mock.patch.object(quotas_module, "datetime", wraps=datetime) as dt:
        for _ in range(10):
            book.add("t", 5)
            status = book.status("t", no_limits, thresholds)
    assert not dt.now.called
    assert status == QuotaStatus(50, None, Level.NORMAL, False, None)
    assert book.used("t") == (50, 50)
    assert quotas_module.today() == datetime.now(UTC).strftime("%Y-%m-%d")


def test_status_without_limits_counts_today_only() -> None:
    book = QuotaBook()
    yesterday = datetime(2026, 3, 1, 12, tzinfo=UTC)
    book.add("t", 7, yesterday)
    now = datetime(2026, 3, 2, 9, tzinfo=UTC)
    assert book.status("t", QuotaPolicy(), ThresholdPolicy(), now).used == 0
    book.add("t", 3, now)
    assert book.status("t", QuotaPolicy(), ThresholdPolicy(), now).used == 3
    assert book.status("nobody", QuotaPolicy(), ThresholdPolicy(), now).used == 0
