"""Body limits: what a client's body may hold, checked before it costs more than its size.

A JSON body is parsed into Python objects that take far more room than their text: an
empty object `{}` is 3 bytes of JSON and about 70 bytes parsed (a 16 MiB body of them
took 385 MB to parse, 4 GB more to read as Responses items). So before parsing, a body
whose objects and arrays (outside strings) come at fewer than BYTES_PER_CONTAINER bytes
each is refused; after parsing, a request with more than MAX_ITEMS messages or items or
MAX_PARTS content parts is refused with its count, before any of them is converted,
counted or planned. Both limits are far past what real traffic sends: an agent's 2,000
steps are 4,000 items.
"""

from __future__ import annotations

import re
from typing import Any

from proxy.errors import InvalidRequest

MAX_ITEMS = 100_000  # messages (chat) or input items (Responses) in one request
MAX_PARTS = 100_000  # content parts, over all of them
BYTES_PER_CONTAINER = 16  # parsed, an object or array takes ~4x this; its text, no less
FREE_CONTAINERS = 4096  # a small body may be all structure
# Items past this are converted and planned in a worker thread, whatever the bytes.
INLINE_MAX_ITEMS = 2_000

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes included


def container_room(size: int) -> int:
    """The most objects and arrays a body of `size` bytes may hold."""
    return FREE_CONTAINERS + size // BYTES_PER_CONTAINER


def needs_exact_count(raw: bytes) -> bool:
    """Whether `raw` may hold too many objects and arrays: its `{` and `[` bytes, counted at
    memchr speed (~5 ms for 16 MiB), bound them; most bodies are far below."""
    return raw.count(b"{") + raw.count(b"[") > container_room(len(raw))


def check_density(raw: bytes) -> None:
    """Refuses a body whose objects and arrays are too many for its size, counted with its
    strings (code, JSON sent as text) taken out."""
    room = container_room(len(raw))
    if not needs_exact_count(raw):
        return
    structure = _STRING.sub(b"", raw)
    found = structure.count(b"{") + structure.count(b"[")
    if found > room:
        raise InvalidRequest(
            f"The request body holds {found:,} JSON objects and arrays in {len(raw):,} bytes; "
            f"the proxy accepts at most {room:,} for a body of that size.",
            code="too_many_objects",
        )


def check_counts(entries: Any, what: str) -> int:
    """The number of `entries` (chat messages or Responses input items) and their content
    parts, refused past MAX_ITEMS or MAX_PARTS; returns items plus parts."""
    if not isinstance(entries, list):
        return 1
    if len(entries) > MAX_ITEMS:
        raise InvalidRequest(
            f"'{what}' holds {len(entries):,} entries; the proxy plans at most {MAX_ITEMS:,}.",
            param=what,
            code="too_many_parts",
        )
    parts = 0
    for entry in entries:
        content = entry.get("content") if isinstance(entry, dict) else None
        if isinstance(content, list):
            parts += len(content)
    if parts > MAX_PARTS:
        raise InvalidRequest(
            f"'{what}' holds {parts:,} content parts; the proxy plans at most {MAX_PARTS:,}.",
            param=what,
            code="too_many_parts",
        )
    return len(entries) + parts
