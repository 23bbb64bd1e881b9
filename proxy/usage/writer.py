"""Usage log step: the single-writer JSONL sink, whole lines only, kept through a full disk."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections import deque

from proxy.usage.record import UsageRecord

logger = logging.getLogger("context_proxy.usage")

_BATCH_LINES = 512  # lines per write(): big enough to amortize syscalls, small enough to stay fast
_MAX_QUEUE = 100_000  # records waiting for the disk; beyond this they are dropped and counted
_MAX_RETRY = 10_000  # rows kept through a failing disk (~5 MB); beyond, the oldest are dropped
_RETRY_S = 1.0  # how often rows that could not be written are tried again
# From the event loop the writer is woken at most this often (unless a batch is full):
# each wake-up is a futex syscall plus a GIL hand-off, which per request cost ~60 µs of
# CPU under load; rows wait at most this long before they reach the file.
_WAKE_DELAY_S = 0.05
_STALE_TIMER_S = 1.0  # a wake-up this late means its loop stopped: wake and re-arm


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
        self._wake_timer: asyncio.TimerHandle | None = None  # a wake-up is scheduled
        self._wake_by = 0.0  # monotonic time by which the scheduled wake-up should have run
        self._thread: threading.Thread | None = None
        self._fd = -1
        self._closed = False
        self.written = 0  # lines handed to the OS
        self.dropped = 0  # lines lost to a full queue, a closed log or a failing disk
        self.write_failures = 0  # writes that failed (their rows wait in `_retry`)
        self._retry: deque[bytes] = deque()  # rows a failed write left, oldest first
        self._failing = False  # the last write failed
        self._torn = False  # the file may end mid-line (see _undo)
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
            if (
                self._wake_timer is None
                or len(self._pending) >= _BATCH_LINES
                or time.monotonic() > self._wake_by  # its loop stopped: the timer never fires
            ):
                self._wake_soon()
        except Exception as exc:  # a lost usage line must not fail the request
            self.dropped += 1
            logger.error("usage record %s dropped: %s", record.request_id, type(exc).__name__)

    def _wake_soon(self) -> None:
        # Waking the writer is a futex syscall and puts a second thread in line for the
        # GIL: from the event loop it is done once per _WAKE_DELAY_S for every row queued
        # meanwhile, or at once when a whole batch waits. flush() and aclose() wake it too.
        timer = self._wake_timer
        stale = timer is not None and time.monotonic() > self._wake_by
        if stale or len(self._pending) >= _BATCH_LINES:
            self._wakeup.set()
        if timer is not None:
            if not stale:
                return
            timer.cancel()  # its loop no longer runs: arm a new one on this loop
            self._wake_timer = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on a loop (a thread, a test): at once
            self._wakeup.set()
            return
        self._wake_timer = loop.call_later(_WAKE_DELAY_S, self._timer_fired)
        self._wake_by = time.monotonic() + _WAKE_DELAY_S + _STALE_TIMER_S

    def _timer_fired(self) -> None:
        self._wake_timer = None
        self._wakeup.set()

    async def flush(self) -> None:
        """Wait until every record queued before this call is in the file (for tests, admin)."""
        target = self._accepted
        if self._handled < target:
            self._wakeup.set()
        while self._handled < target and self._thread is not None and self._thread.is_alive():
            await asyncio.sleep(0.001)

    async def aclose(self) -> None:
        """Write everything queued, flush, and stop the writer."""
        if self._closed:
            return
        if self._thread is None:
            await self.start()
        self._closed = True
        if self._wake_timer is not None:
            self._wake_timer.cancel()
            self._wake_timer = None
        self._wakeup.set()
        assert self._thread is not None
        await asyncio.to_thread(self._thread.join)
        if self._fd >= 0:
            await asyncio.to_thread(_fsync_close, self._fd)
            self._fd = -1

    @property
    def failing(self) -> bool:
        """True while writes fail (e.g. the disk is full); /healthz and /metrics say so."""
        return self._failing

    @property
    def backlog(self) -> int:
        """Rows that could not be written yet and wait for a retry."""
        return len(self._retry)

    def _run(self) -> None:
        pending = self._pending
        while True:
            # With rows waiting for a retry, wake up on time to try again.
            self._wakeup.wait(_RETRY_S if self._retry else None)
            # Cleared before draining: a record appended from here on sets it again.
            self._wakeup.clear()
            stopping = self._closed
            if self._retry and not pending:
                self._emit([])
            while pending:
                batch = [pending.popleft() for _ in range(min(len(pending), _BATCH_LINES))]
                self._emit(batch)  # one write per batch of whole lines, flushed at once
            if stopping:
                self.dropped += len(self._retry)  # a last failure at shutdown: counted
                self._retry.clear()
                return

    def _emit(self, batch: list[bytes]) -> None:
        """Write the retry rows, then `batch`, as whole lines; on failure keep them all."""
        rows = [*self._retry, *batch] if self._retry else batch
        try:
            if self._fd >= 0:
                self._write_whole(b"".join(rows))
            else:
                out = getattr(sys.stdout, "buffer", None)
                if out is not None:
                    out.write(b"".join(rows))
                else:
                    sys.stdout.write(b"".join(rows).decode())
                sys.stdout.flush()
            self.written += len(rows)
            self._retry.clear()
            if self._failing:
                logger.warning("usage log writable again; %d waiting rows written", len(rows))
            self._failing = False
        except Exception as exc:
            if not self._failing:  # once per failing spell, not once per batch
                logger.error("usage log write failed (%s); rows kept for retry", exc)
            self._failing = True
            self._retry.extend(batch)
            over = len(self._retry) - _MAX_RETRY
            if over > 0:
                for _ in range(over):
                    self._retry.popleft()
                self.dropped += over
            # Counted last: whoever sees the failure counted (a /metrics scrape, a test)
            # also sees its rows kept and the log marked failing.
            self.write_failures += 1
        finally:
            self._handled += len(batch)  # written, or kept for retry: no longer queued

    def _write_whole(self, data: bytes) -> None:
        """Append `data` (whole lines) so that the file holds all of it or none of it."""
        if self._torn:  # an earlier fragment could not be cut: end its line first
            data = b"\n" + data
        done = 0
        try:
            while done < len(data):  # os.write may be short (disk nearly full, signals)
                done += os.write(self._fd, memoryview(data)[done:])
        except OSError:
            if done:
                self._undo(done)
            raise
        self._torn = False

    def _undo(self, done: int) -> None:
        """Remove the `done` bytes a failed write left at the end of the file. Another
        process sharing the file may have appended after them: then they cannot be cut,
        and the next write starts with a newline, making them a line of their own that
        readers skip (iter_records), so no whole row is ever glued to them."""
        try:
            end = os.lseek(self._fd, 0, os.SEEK_CUR)  # O_APPEND: just past our bytes
            if os.fstat(self._fd).st_size == end:
                os.ftruncate(self._fd, end - done)
                return
        except OSError:
            pass
        self._torn = True


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
