"""Body limits: what a client's body may hold, checked before it costs more than its size.

A JSON body is parsed into Python objects that take far more room than their text: an empty
object `{}` is 3 bytes of JSON and about 70 bytes parsed (a 16 MiB body of them took 385 MB
to parse, 4 GB more to read as Responses items), a one-character string `"a",` 4 bytes and
~60 parsed (31 MB of them: 710 MB and 480 ms of the event loop). So before parsing, a body
whose objects and arrays (outside strings) come at fewer than BYTES_PER_CONTAINER bytes
each, or whose values at fewer than BYTES_PER_VALUE, is refused (real bodies: 90 bytes or
more per value, agents' and chats' alike); after parsing, a request with more messages or
items, or content parts, than its size allows (and never more than MAX_ITEMS, MAX_PARTS) is
refused with its count, before any of them is converted, counted or planned. The limits are
far past what real traffic sends: an agent's 2,000 steps are 4,000 items.
"""

from __future__ import annotations

from typing import Any

from proxy.errors import InvalidRequest
from proxy.server.pipeline.json_structure import structure_counts

MAX_ITEMS = 100_000  # messages (chat) or input items (Responses) in one request
MAX_PARTS = 100_000  # content parts, over all of them
BYTES_PER_CONTAINER = 16  # parsed, an object or array takes ~4x this; its text, no less
BYTES_PER_VALUE = 10  # parsed, a short string or number takes ~3-6x this
# Read into the planner's messages and items, an entry or a part costs ~700 bytes more:
# bodies hold at most one per this many bytes on average (a real part holds text; a
# message `{"role":"user","content":"hi"}` alone is 30), so that a body's memory stays
# within 16x its size (bench_hostile.py).
BYTES_PER_ITEM = 32
BYTES_PER_PART = 64
FREE_CONTAINERS = 4096  # a small body may be all structure
# Items past this are converted and planned in a worker thread, whatever the bytes.
INLINE_MAX_ITEMS = 2_000


def container_room(size: int) -> int:
    """The most objects and arrays a body of `size` bytes may hold."""
    return FREE_CONTAINERS + size // BYTES_PER_CONTAINER


def value_room(size: int, bytes_per_value: int = BYTES_PER_VALUE) -> int:
    """The most values (objects, arrays, and what commas part) a body of `size` bytes may
    hold."""
    return FREE_CONTAINERS + size // bytes_per_value


def needs_exact_count(raw: bytes, bytes_per_value: int = BYTES_PER_VALUE) -> bool:
    """Whether `raw` may hold too many objects, arrays or values: its `{`, `[` and `,`
    bytes, counted at memchr speed (~5 ms for 16 MiB), bound them; most bodies are far
    below."""
    containers = raw.count(b"{") + raw.count(b"[")
    if containers > container_room(len(raw)):
        return True
    return containers + raw.count(b",") > value_room(len(raw), bytes_per_value)


def check_density(raw: bytes, bytes_per_value: int = BYTES_PER_VALUE) -> None:
    """Refuses a body whose objects and arrays, or values, are too many for its size,
    counted with its strings (code, JSON sent as text) taken out."""
    if not needs_exact_count(raw, bytes_per_value):
        return
    containers, commas = structure_counts(raw)
    room = container_room(len(raw))
    if containers > room:
        raise InvalidRequest(
            f"The request body holds {containers:,} JSON objects and arrays in {len(raw):,} "
            f"bytes; the proxy accepts at most {room:,} for a body of that size.",
            code="too_many_objects",
        )
    values, room = containers + commas, value_room(len(raw), bytes_per_value)
    if values > room:
        raise InvalidRequest(
            f"The request body holds {values:,} JSON values in {len(raw):,} bytes; the "
            f"proxy accepts at most {room:,} for a body of that size.",
            code="too_many_objects",
        )


def check_counts(entries: Any, what: str, size: int) -> int:
    """The number of `entries` (chat messages or Responses input items) and their content
    parts, refused past what a body of `size` bytes may hold (MAX_ITEMS and MAX_PARTS at
    most); returns items plus parts."""
    if not isinstance(entries, list):
        return 1
    most_items = min(MAX_ITEMS, FREE_CONTAINERS + size // BYTES_PER_ITEM)
    if len(entries) > most_items:
        raise InvalidRequest(
            f"'{what}' holds {len(entries):,} entries; the proxy plans at most "
            f"{most_items:,} in a body of {size:,} bytes.",
            param=what,
            code="too_many_parts",
        )
    parts = 0
    for entry in entries:
        content = entry.get("content") if isinstance(entry, dict) else None
        if isinstance(content, list):
            parts += len(content)
    most_parts = min(MAX_PARTS, FREE_CONTAINERS + size // BYTES_PER_PART)
    if parts > most_parts:
        raise InvalidRequest(
            f"'{what}' holds {parts:,} content parts; the proxy plans at most "
            f"{most_parts:,} in a body of {size:,} bytes.",
            param=what,
            code="too_many_parts",
        )
    return len(entries) + parts
