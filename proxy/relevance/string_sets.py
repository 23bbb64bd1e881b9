"""A memo of the strings read from each text (its ids, its figures), bounded in entries and
in bytes.

Clients resend the whole history every turn, so each text's ids are read once and looked
up after. Bounded by entries alone, a memo of sets is not bounded at all: a client can send
texts of a megabyte of distinct numbers, each set megabytes. So the memo also counts what
its sets hold (an estimate of their strings' size) and drops the least recently used past
`max_bytes`; a set over an eighth of that is returned and not remembered.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

# What one string in a set costs, besides its characters: the str object's header and the
# set's slot for it (CPython, 64-bit: about 49 and 16-32 bytes).
_PER_STRING = 80
_PER_SET = 220  # an empty frozenset and the memo's own entry


class StringSets:
    """`read(text)` for each text, read once and remembered (keyed by the text's hash)."""

    def __init__(
        self,
        read: Callable[[str], frozenset[str]],
        max_entries: int = 100_000,
        max_bytes: int = 16 * 2**20,
    ) -> None:
        self._read = read
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._table: OrderedDict[int, tuple[frozenset[str], int]] = OrderedDict()
        self.bytes = 0  # the estimated size of what is remembered
        # Its own lock, held only to look up or store: never while a text is read.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._table)

    def get(self, text: str) -> frozenset[str]:
        key = hash(text)
        with self._lock:
            found = self._table.get(key)
            if found is not None:
                self._table.move_to_end(key)
                return found[0]
        strings = self._read(text)
        size = _PER_SET + sum(_PER_STRING + len(s) for s in strings)
        if size > self._max_bytes // 8:
            return strings  # too big to keep: read again if asked again
        with self._lock:
            old = self._table.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            self._table[key] = strings, size
            self.bytes += size
            while len(self._table) > self._max_entries or self.bytes > self._max_bytes:
                self.bytes -= self._table.popitem(last=False)[1][1]
        return strings
