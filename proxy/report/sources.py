"""Report sources: the usage logs a report reads, as one stream of lines.

A fleet writes one log per replica, and logs get rotated and gzipped: `report` takes any
number of paths and globs (`'logs/*.jsonl*'`), reads `.gz` files through gzip, and streams
every line of every file, in the order given (each glob's matches sorted), so that no file
is held in memory, nor a line past a megabyte (usage/log_files.py)."""

from __future__ import annotations

import glob
from collections.abc import Iterator, Sequence

from proxy.usage.log_files import bounded_lines, open_log


def expand(patterns: Sequence[str]) -> tuple[list[str], list[str]]:
    """The files `patterns` name (a glob's matches sorted; a plain path as it is), and the
    globs that matched nothing."""
    found: list[str] = []
    empty: list[str] = []
    for pattern in patterns:
        if glob.has_magic(pattern):
            matches = sorted(glob.glob(pattern))
            found += matches
            if not matches:
                empty.append(pattern)
        else:
            found.append(pattern)
    return found, empty


def lines(paths: Sequence[str]) -> Iterator[bytes]:
    """Every line of every file, gzip-compressed ones (`.gz`) read through gzip. An
    unreadable file raises OSError before any of its lines."""
    for path in paths:
        with open_log(path) as f:
            yield from bounded_lines(f)
