"""Usage recording: the per-request record, warning levels, and the single-writer JSONL sink."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from proxy.policy import ThresholdPolicy
from proxy.types import Level

logger = logging.getLogger("context_proxy.usage")

_BATCH_LINES = 512  # lines per write(): big enough to amortize syscalls, small enough to stay fast
_MAX_QUEUE = 100_000  # records waiting for the disk; beyond this they are dropped and counted
_MODEL_LOG_CHARS = 200  # model names come from clients: cap what goes into a warning line


def utc_now_iso() -> str:
    """Now as ISO 8601 UTC with millisecond precision and a 'Z' suffix."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(slots=True)
class UsageRecord:
    """One line of the usage log: numbers and names only, never content or keys."""

    ts: str = field(default_factory=utc_now_iso)
    request_id: str = ""
    team: str = "default"
    model: str = ""
    status: int = 0
    stream: bool = False
    context_window: int | None = None
    budget: int | None = None
    tokens_before: int = 0
    tokens_after: int = 0
    dropped: int = 0
    truncated: int = 0
    summarized: int = 0
    deduped: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    usage_source: str = "estimated"  # "upstream" or "estimated"
    utilization: float | None = None
    level: Level = Level.NORMAL
    quota_used: int = 0
    quota_limit: int | None = None
    quota_level: Level = Level.NORMAL
    latency_ms: float = 0.0
    upstream_ms: float | None = None
    error: str | None = None
    kind: str = "chat"  # "chat", or "summary" for the proxy's own summarization calls
    policy: str = "default"

    def to_json_line(self) -> bytes:
        """The record as one JSON line ending in a newline (orjson handles slots and enums)."""
        return orjson.dumps(self, option=orjson.OPT_APPEND_NEWLINE)


def level_for(utilization: float | None, thresholds: ThresholdPolicy) -> Level:
    """`normal` below the warning threshold, `warning` from it, `critical` from critical."""
    if utilization is None:
        return Level.NORMAL
    if utilization >= thresholds.critical:
        return Level.CRITICAL
    if utilization >= thresholds.warning:
        return Level.WARNING
    return Level.NORMAL


_RANK = {Level.NORMAL: 0, Level.WARNING: 1, Level.CRITICAL: 2}


class ThresholdWatch:
    """Remembers each team's last level and logs one warning line when it rises."""

    def __init__(self, quiet_s: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        # Keyed by (team, source); teams come from policies, so this stays small.
        self._last: dict[tuple[str, str], Level] = {}
        # A team whose requests alternate between small and large would cross on every
        # large one: the log line for a (team, source, level) is repeated at most every
        # `quiet_s` seconds; the return value (and so the metric) still counts every crossing.
        self._logged: dict[tuple[str, str, Level], float] = {}
        self._quiet_s = quiet_s
        self._clock = clock

    def observe(
        self,
        team: str,
        model: str,
        level: Level,
        utilization: float | None,
        *,
        source: str = "context",
    ) -> bool:
        """Record `level`; True (and a log line) when it crossed into warning or critical."""
        key = (team, source)
        previous = self._last.get(key, Level.NORMAL)
        self._last[key] = level
        if _RANK[level] <= _RANK[previous]:
            return False
        now = self._clock()
        logged = self._logged.get((team, source, level))
        if logged is not None and now - logged < self._quiet_s:
            return True
        self._logged[(team, source, level)] = now
        fields = {
            "event": "usage_threshold",
            "source": source,
            "team": team,
            "model": model[:_MODEL_LOG_CHARS],
            "level": level.value,
            "previous": previous.value,
            "utilization": None if utilization is None else round(utilization, 4),
        }
        logger.warning("usage threshold crossed %s", orjson.dumps(fields).decode(), extra=fields)
        return True


def iter_records(path: str, offset: int = 0) -> Iterator[dict[str, Any]]:
    """Stream the log's records from `offset`, skipping blank, torn or malformed lines."""
    with open(path, "rb") as f:
        if offset:
            f.seek(offset)
        for line in f:
            if len(line) < 2 or line[-1] != 0x0A:  # blank, or a last line still being written
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                yield obj


class UsageLog:
    """Appends records as whole lines from one writer thread, so lines never interleave.

    Durability choice: each batch of whole lines goes out in one os.write() on an O_APPEND
    descriptor, so SIGKILL can at worst cut the final line short. At start, a file whose
    last byte is not a newline gets one appended: the torn fragment becomes a line of its
    own that readers skip (`iter_records`), and nothing already written is rewritten.
    Several worker processes may share the file: O_APPEND writes do not interleave.
    """

    def __init__(self, path: str, *, max_queue: int = _MAX_QUEUE) -> None:
        self.path = path
        # A deque's append and popleft are atomic under the GIL: the request path pays
        # about a microsecond, with no lock unless the writer sleeps and must be woken.
        self._pending: deque[bytes] = deque()
        self._max_queue = max_queue
        self._wakeup = threading.Event()
        self._thread: threading.Thread | None = None
        self._fd = -1
        self._closed = False
        self.written = 0  # lines handed to the OS
        self.dropped = 0  # lines lost to a full queue, a closed log or a failed write
        self._accepted = 0  # lines queued so far
        self._handled = 0  # lines the writer has written or lost

    async def start(self) -> None:
        """Open the file (repairing a torn last line) and start the writer thread."""
        if self._thread is not None:
            return
        if self.path != "-":
            self._fd = await asyncio.to_thread(_open_append, self.path)
        self._thread = threading.Thread(target=self._run, name="usage-log-writer", daemon=True)
        self._thread.start()

    def write(self, record: UsageRecord) -> None:
        """Queue one record; never blocks and never raises into the request path."""
        try:
            if self._closed:
                raise RuntimeError("usage log is closed")
            if len(self._pending) >= self._max_queue:
                raise OverflowError("usage log queue is full")
            self._pending.append(record.to_json_line())
            self._accepted += 1
            if not self._wakeup.is_set():
                self._wake_soon()
        except Exception as exc:  # a lost usage line must not fail the request
            self.dropped += 1
            logger.error("usage record %s dropped: %s", record.request_id, type(exc).__name__)

    def _wake_soon(self) -> None:
        # Waking the writer is a futex syscall (~20 µs here) and puts a second thread in
        # line for the GIL: from the event loop, it is done once the current step is over,
        # which is after the answer has been handed to the socket.
        try:
            asyncio.get_running_loop().call_soon(self._wakeup.set)
        except RuntimeError:  # not on a loop (a thread, a test): at once
            self._wakeup.set()

    async def flush(self) -> None:
        """Wait until every record queued before this call is in the file (for tests, admin)."""
        target = self._accepted
        while self._handled < target and self._thread is not None and self._thread.is_alive():
            await asyncio.sleep(0.001)

    async def aclose(self) -> None:
        """Write everything queued, flush, and stop the writer."""
        if self._closed:
            return
        if self._thread is None:
            await self.start()
        self._closed = True
        self._wakeup.set()
        assert self._thread is not None
        await asyncio.to_thread(self._thread.join)
        if self._fd >= 0:
            await asyncio.to_thread(_fsync_close, self._fd)
            self._fd = -1

    def _run(self) -> None:
        pending = self._pending
        while True:
            self._wakeup.wait()
            # Cleared before draining: a record appended from here on sets it again.
            self._wakeup.clear()
            stopping = self._closed
            while pending:
                batch = [pending.popleft() for _ in range(min(len(pending), _BATCH_LINES))]
                self._emit(batch)  # one write per batch of whole lines, flushed at once
            if stopping:
                return

    def _emit(self, batch: list[bytes]) -> None:
        data = b"".join(batch)
        try:
            if self._fd >= 0:
                view = memoryview(data)
                while view:  # os.write may be short (disk nearly full, signals): finish it
                    view = view[os.write(self._fd, view) :]
            else:
                out = getattr(sys.stdout, "buffer", None)
                if out is not None:
                    out.write(data)
                else:
                    sys.stdout.write(data.decode())
                sys.stdout.flush()
            self.written += len(batch)
        except Exception:
            self.dropped += len(batch)
            logger.exception("usage log write failed; %d lines lost", len(batch))
        finally:
            self._handled += len(batch)


def _open_append(path: str) -> int:
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        os.write(fd, b"\n")
        logger.warning("usage log %s ended in a torn line; terminated it so readers skip it", path)
    return fd


def _fsync_close(fd: int) -> None:
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
