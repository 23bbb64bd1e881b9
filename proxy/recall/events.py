"""Events: a stream's bytes as whole server-sent events, and what rounds of a recall share.

Only a request whose plan declared the recall tool is read event by event (its splicer
must see each one whole); every other stream goes through the plain relay untouched.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

# An event ends at a blank line: two line ends in a row, each CRLF, LF or CR (the SSE spec).
_EVENT_END = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r|\n)")
MAX_EVENT_BYTES = 4 * 1024 * 1024  # one event past this is passed on as it is, unread


class EventSplitter:
    """Bytes in, whole events out (each with its blank line), in order."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        self._buf += chunk
        start = 0
        for m in _EVENT_END.finditer(self._buf):
            if m.end() == len(self._buf) and self._buf[-1:] == b"\r":
                break  # a CR at the end may be the first half of a CRLF
            yield bytes(self._buf[start : m.end()])
            start = m.end()
        del self._buf[:start]
        if len(self._buf) > MAX_EVENT_BYTES:  # no end in sight: on as it is
            yield bytes(self._buf)
            self._buf.clear()

    def flush(self) -> bytes:
        rest = bytes(self._buf)
        self._buf.clear()
        return rest


def parse(event: bytes) -> tuple[str | None, Any]:
    """An event's `event:` name and its data, parsed (None when it is not JSON)."""
    name: str | None = None
    data: list[bytes] = []
    for line in event.splitlines():
        if line.startswith(b"event:"):
            name = line[6:].strip().decode("utf-8", "replace")
        elif line.startswith(b"data:"):
            data.append(line[5:].lstrip())
    payload = b"\n".join(data)
    if not payload or payload == b"[DONE]":
        return name, payload.decode() if payload else None
    try:
        return name, orjson.loads(payload)
    except orjson.JSONDecodeError:
        return name, None


def encode(data: Any, name: str | None = None) -> bytes:
    """One event: its name line (when it has one), then its data."""
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def as_dict(value: Any) -> dict[str, Any]:
    """`value` when it is an object, else an empty one (what a reader of a field needs)."""
    return value if isinstance(value, dict) else {}


def add_usage(total: Any, more: Any) -> Any:
    """Two usage objects of one API summed, count by count (nested details too); what is
    not a count is the later one's."""
    if not isinstance(total, dict):
        return more
    if not isinstance(more, dict):
        return total
    out = dict(total)
    for key, value in more.items():
        before = out.get(key)
        if type(value) is int and type(before) is int:
            out[key] = before + value
        elif isinstance(value, dict) and isinstance(before, dict):
            out[key] = add_usage(before, value)
        elif value is not None or key not in out:
            out[key] = value
    return out


@dataclass(slots=True)
class Call:
    """A call of the recall tool: its id and its arguments (text, or the object a Messages
    answer gives)."""

    id: str
    arguments: Any = ""


@dataclass(slots=True)
class Round:
    """What one round of an answer held that the proxy acts on: the recall tool's calls,
    how many calls of the client's own tools, and its usage."""

    calls: list[Call] = field(default_factory=list)
    client_calls: int = 0
    usage: Any = None

    @property
    def only_recall(self) -> bool:
        """The model asked only the proxy: the answer goes on for the client."""
        return bool(self.calls) and not self.client_calls
