"""Reading usage logs as they lie on disk: plain or gzipped, rotated beside the live one,
and line by line within a bound, so that no file (however large, however crafted) is
held in memory, nor any one line of it."""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from typing import BinaryIO

# A usage row is about a kilobyte; a line longer than this is not one (it is skipped).
MAX_LINE_BYTES = 1 << 20


def open_log(path: str) -> BinaryIO:
    """The file at `path` for reading bytes, through gzip when it ends in `.gz`."""
    if path.endswith(".gz"):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def bounded_lines(f: BinaryIO, limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """Every line of `f` of at most `limit` bytes, with its newline; a longer line is read
    through in pieces and skipped, and a last line without one is yielded as it is."""
    while True:
        line = f.readline(limit + 1)
        if not line:
            return
        if len(line) <= limit or line.endswith(b"\n"):
            if len(line) <= limit:
                yield line
            continue
        while line and not line.endswith(b"\n"):  # the rest of an overlong line
            line = f.readline(limit)


def rotated_logs(path: str, since: float) -> list[str]:
    """The files logrotate (or a copy) made of the log at `path`, `path.1`, `path.2.gz`,
    `path-20261101.gz`..., last written at or after `since` (a Unix time): older ones hold
    no row of the period. Oldest first."""
    folder = os.path.dirname(path) or "."
    base = os.path.basename(path)
    found: list[tuple[float, str]] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    for name in names:
        if name == base or not name.startswith(base) or name[len(base)] not in ".-_":
            continue
        full = os.path.join(folder, name)
        try:
            written = os.path.getmtime(full)
        except OSError:
            continue
        if written >= since and os.path.isfile(full):
            found.append((written, full))
    return [name for _, name in sorted(found)]
