"""Server-sent events from the upstream: pass them on whole, read usage and text on the way."""

from __future__ import annotations

import re
from typing import Any

import orjson

_EVENT_END = re.compile(rb"\r?\n\r?\n")
# Chunks carry `"usage": null` once include_usage is on; clients that did not ask for usage
# get the stream they expect, without it.
_NULL_USAGE = re.compile(rb',\s*"usage"\s*:\s*null')


class StreamTap:
    """Splits an SSE byte stream into events; remembers usage and, lazily, the text.

    Only events that carry a non-null `usage` are parsed on the way, and only they and
    [DONE] are looked at one by one; the generated text is read from the kept events at
    the end, and only when the upstream sent no usage.
    """

    def __init__(self, client_wants_usage: bool) -> None:
        self._client_wants_usage = client_wants_usage
        self._pending = b""
        self._events: list[bytes] = []
        self.usage: dict[str, Any] | None = None
        self.saw_done = False

    def feed(self, chunk: bytes) -> bytes:
        """The complete events in `chunk` (plus what was pending) that the client should get."""
        data = self._pending + chunk if self._pending else chunk
        if b"\r" in data:  # events may end in CRLF: found one by one
            return self._by_event(data)
        end = data.rfind(b"\n\n") + 2  # 1: no event ends in `data`
        if end == 1:
            self._pending = data
            return b""
        whole, self._pending = data[:end], data[end:]
        if not self._client_wants_usage and b'"usage"' in whole:
            whole = _NULL_USAGE.sub(b"", whole)
        # Only the events with a usage object or [DONE] need a look: the runs of events
        # between them are passed on as they are, in one piece each.
        out: list[bytes] = []
        start = 0
        while start < len(whole):
            at = _next_mark(whole, start)
            if at < 0:
                out.append(whole[start:])
                self._events.append(out[-1])
                break
            before = whole.rfind(b"\n\n", start, at)  # the end of the event before
            begins = before + 2 if before >= 0 else start
            ends = whole.find(b"\n\n", at) + 2
            if begins > start:
                out.append(whole[start:begins])
                self._events.append(out[-1])
            kept = self._inspect(whole[begins:ends])
            if kept:
                out.append(kept)
            start = ends
        return b"".join(out)

    def _by_event(self, data: bytes) -> bytes:
        out: list[bytes] = []
        start = 0
        for match in _EVENT_END.finditer(data):
            event = data[start : match.end()]
            start = match.end()
            kept = self._inspect(event)
            if kept:
                out.append(kept)
        self._pending = data[start:]
        return b"".join(out)

    def flush(self) -> bytes:
        """Whatever is left when the upstream ends (an event without its blank line)."""
        rest, self._pending = self._pending, b""
        return self._inspect(rest) if rest.strip() else rest

    def text(self) -> str:
        """The generated text and tool-call arguments, for estimating completion tokens."""
        parts: list[str] = []
        for events in self._events:  # a run of events, or one
            for event in _EVENT_END.split(events):
                parsed = _json_payload(event)
                if parsed is not None:
                    _collect_text(parsed.get("choices"), parts)
        return "".join(parts)

    def _inspect(self, event: bytes) -> bytes:
        if b"[DONE]" in event and _payload(event) == b"[DONE]":
            self.saw_done = True
            return event
        if b'"usage"' in event:
            if not self._client_wants_usage:
                event = _NULL_USAGE.sub(b"", event)
            if b'"usage"' in event:  # a usage object, not null
                parsed = _json_payload(event) or {}
                usage = parsed.get("usage")
                if isinstance(usage, dict):
                    self.usage = usage
                    if not self._client_wants_usage and not parsed.get("choices"):
                        return b""  # the usage-only chunk we asked for on our own behalf
        self._events.append(event)
        return event


def _next_mark(data: bytes, start: int) -> int:
    """Where the next usage object or [DONE] may be, from `start`; -1 if nowhere."""
    usage, done = data.find(b'"usage"', start), data.find(b"[DONE]", start)
    return done if usage < 0 else usage if done < 0 else min(usage, done)


def _payload(event: bytes) -> bytes:
    return b"".join(line[5:].lstrip() for line in event.splitlines() if line.startswith(b"data:"))


def _json_payload(event: bytes) -> dict[str, Any] | None:
    payload = _payload(event)
    if not payload or payload == b"[DONE]":
        return None
    try:
        parsed = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _collect_text(choices: Any, parts: list[str]) -> None:
    if not isinstance(choices, list):
        return
    for choice in choices:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict):
            continue
        content = delta.get("content")
        if isinstance(content, str):
            parts.append(content)
        for call in delta.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                for key in ("name", "arguments"):
                    if isinstance(function.get(key), str):
                        parts.append(function[key])


def error_event(message: str, type_: str, code: str) -> bytes:
    """An OpenAI-shaped error as one SSE event: clients raise it instead of hanging."""
    body = orjson.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}})
    return b"data: " + body + b"\n\n"
