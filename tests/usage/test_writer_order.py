"""The usage writer: a failed write is counted only once its rows are kept for a retry."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import orjson
import pytest

from proxy.usage import UsageLog, UsageRecord


async def test_a_counted_failure_already_has_its_rows_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer thread logged the failure between counting it and keeping its rows: an
    observer could see a failure with no row waiting (test_usage's failing-write test
    failed that way on a loaded machine). A slow log line makes the window wide here."""
    p = tmp_path / "u.jsonl"
    log = UsageLog(str(p))
    await log.start()
    real_write, fail = os.write, {"left": 1}

    def flaky(fd: int, data: bytes | memoryview) -> int:
        if fail["left"]:
            fail["left"] -= 1
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    def slow_error(*args: object, **kwargs: object) -> None:
        time.sleep(0.3)

    monkeypatch.setattr("proxy.usage.writer.os.write", flaky)
    monkeypatch.setattr("proxy.usage.writer.logger.error", slow_error)
    log.write(UsageRecord(request_id="req-1"))
    while log.write_failures == 0:
        await asyncio.sleep(0.005)
    assert log.failing and log.backlog == 1
    log.write(UsageRecord(request_id="req-2"))
    await log.aclose()
    got = [orjson.loads(x)["request_id"] for x in p.read_bytes().splitlines()]
    assert got == ["req-1", "req-2"]
