"""Server-sent events from the upstream: pass them on whole, read usage and text on the way."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson

# An event ends at a blank line: two line ends in a row, each CRLF, LF or CR (the SSE spec).
# The first one is CR only when no LF follows, so a lone CRLF is never read as two.
_EVENT_END = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r|\n)")
# Chunks carry `"usage": null` once include_usage is on; clients that did not ask for usage
# get the stream they expect, without it.
_NULL_USAGE = re.compile(rb',\s*"usage"\s*:\s*null')
# An upstream may stream forever: the events kept for estimating the text are capped, and so
# is one unfinished event (past it, its bytes pass through unparsed until it ends).
MAX_KEPT_BYTES = 1024 * 1024
MAX_EVENT_BYTES = 1024 * 1024
_LOOKBACK = 3  # an event end not yet complete at the buffer's end spans at most 3 bytes


class StreamTap:
    """Splits an SSE byte stream into events; remembers usage and, lazily, the text.

    Only events that carry a non-null `usage` are parsed on the way, and only they and
    [DONE] are looked at one by one; the generated text is read from the kept events at
    the end, and only when the upstream sent no usage. Each byte is scanned a bounded number
    of times (the search resumes where it stopped), and memory stays bounded however long
    the stream goes on.
    """

    def __init__(
        self,
        client_wants_usage: bool,
        max_kept_bytes: int = MAX_KEPT_BYTES,
        max_event_bytes: int = MAX_EVENT_BYTES,
    ) -> None:
        self._client_wants_usage = client_wants_usage
        self._max_kept = max_kept_bytes
        self._max_event = max_event_bytes
        self._buf = bytearray()  # the unfinished event
        self._scan = 0  # where the search for an event end resumes in _buf
        self._cr = False  # a CR was seen: events are split by the general pattern from now on
        self._ended_in_cr = False  # the last event passed on ended in a CR (maybe a CRLF's half)
        self._skipping = False  # inside an over-long event, passed through unparsed
        self._events: list[bytes] = []
        self._kept = 0
        self.bytes_beyond = 0  # event bytes not kept for the text estimate
        self.usage: dict[str, Any] | None = None
        self.saw_done = False

    @property
    def finished(self) -> bool:
        """The stream reached its end: the `[DONE]` or the final usage chunk."""
        return self.saw_done or self.usage is not None

    def feed(self, chunk: bytes) -> bytes:
        """The complete events in `chunk` (plus what was pending) that the client should get."""
        if not self._buf and not self._cr and not self._skipping and b"\r" not in chunk:
            # The usual case: nothing pending, LF events; whole events pass without a copy.
            end = chunk.rfind(b"\n\n") + 2
            if end == 1:  # no event ends in the chunk
                end = 0
            elif end == len(chunk):
                return self._pass(chunk)
            self._buf += chunk[end:]
            self._scan = max(0, len(self._buf) - _LOOKBACK)
            whole = self._pass(chunk[:end]) if end else b""
            if len(self._buf) <= self._max_event:
                return whole
            self._skipping = True
            return whole + self._release()
        buf = self._buf
        buf += chunk
        out: list[bytes] = []
        if self._skipping and not self._skip(out):
            return b"".join(out)
        if not self._cr and b"\r" in chunk:
            self._cr = True
        if self._cr:
            if self._ended_in_cr and buf[:1] == b"\n":
                # The LF of a CRLF whose CR ended the last event: it completes that event's
                # end, so it goes now, not with the next event.
                out.append(b"\n")
                del buf[:1]
                self._scan = 0
            self._ended_in_cr = False
            ends = self._ends()
            if ends:
                whole = bytes(buf[: ends[-1]])
                del buf[: ends[-1]]
                passed = self._by_event(whole, ends)
                self._ended_in_cr = passed.endswith(b"\r")  # of what the client got
                out.append(passed)
        else:
            end = buf.rfind(b"\n\n", max(0, self._scan - 1)) + 2  # 1: no event ends in buf
            if end > 1:
                whole = bytes(buf[:end])
                del buf[:end]
                out.append(self._pass(whole))
        self._scan = max(0, len(buf) - _LOOKBACK)
        if len(buf) > self._max_event:  # no end in sight: pass it on, stop parsing it
            out.append(self._release())
            self._skipping = True
        return b"".join(out)

    def _ends(self) -> list[int]:
        """Where each event completed in the buffer ends (the general, CR-aware pattern)."""
        # An end in a CR is taken at once: if an LF follows in the next chunk, it only makes
        # an empty first line of the next event, which changes no byte the client gets.
        return [m.end() for m in _EVENT_END.finditer(self._buf, self._scan)]

    def _release(self) -> bytes:
        """All of the buffer but a possibly unfinished event end, passed on unparsed."""
        cut = len(self._buf) - _LOOKBACK
        passed = bytes(self._buf[:cut])
        del self._buf[:cut]
        self._scan = 0
        self.bytes_beyond += len(passed)
        return passed

    def _skip(self, out: list[bytes]) -> bool:
        """Pass on the over-long event up to its end; True once it ended."""
        ends = self._ends()
        if not ends:
            if len(self._buf) > _LOOKBACK:
                out.append(self._release())
            return False
        first = ends[0]
        out.append(bytes(self._buf[:first]))
        del self._buf[:first]
        self.bytes_beyond += first
        self._skipping, self._scan = False, 0
        return True

    def _pass(self, whole: bytes) -> bytes:
        """Whole events split by LF only: runs without usage or [DONE] pass in one piece."""
        if not self._client_wants_usage and b'"usage"' in whole:
            whole = _NULL_USAGE.sub(b"", whole)
        out: list[bytes] = []
        start = 0
        while start < len(whole):
            at = _next_mark(whole, start)
            if at < 0:
                out.append(whole[start:])
                self._keep(out[-1])
                break
            before = whole.rfind(b"\n\n", start, at)  # the end of the event before
            begins = before + 2 if before >= 0 else start
            ends = whole.find(b"\n\n", at) + 2
            if begins > start:
                out.append(whole[start:begins])
                self._keep(out[-1])
            kept = self._inspect(whole[begins:ends])
            if kept:
                out.append(kept)
            start = ends
        return b"".join(out)

    def _by_event(self, whole: bytes, ends: list[int]) -> bytes:
        out: list[bytes] = []
        start = 0
        for end in ends:
            kept = self._inspect(whole[start:end])
            start = end
            if kept:
                out.append(kept)
        return b"".join(out)

    def flush(self) -> bytes:
        """Whatever is left when the upstream ends (an event without its blank line)."""
        rest = bytes(self._buf)
        self._buf.clear()
        if self._skipping:
            return rest
        return self._inspect(rest) if rest.strip() else rest

    def text(self) -> str:
        """The generated text and tool-call arguments kept, for estimating completion tokens.

        At most `max_kept_bytes` of events are kept; `estimated_chars_beyond` says how much
        more text there probably was.
        """
        parts: list[str] = []
        for events in self._events:  # a run of events, or one
            for event in _EVENT_END.split(events):
                parsed = _json_payload(event)
                if parsed is not None:
                    _collect_text(parsed.get("choices"), parts)
        return "".join(parts)

    def kept_deltas(self) -> Iterator[dict[str, Any]]:
        """The kept events that hold a `delta`, parsed: the typed APIs' generated text."""
        for events in self._events:
            for event in _EVENT_END.split(events):
                if b'"delta"' in event and (parsed := _json_payload(event)) is not None:
                    yield parsed

    def estimated_chars_beyond(self, text: str) -> int:
        """Text characters in the events not kept, at the kept events' ratio of text to bytes."""
        if not self.bytes_beyond or not self._kept:
            return 0
        return self.bytes_beyond * len(text) // self._kept

    def _keep(self, events: bytes) -> None:
        if self._kept + len(events) <= self._max_kept:
            self._events.append(events)
            self._kept += len(events)
        else:
            self.bytes_beyond += len(events)

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
        self._keep(event)
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
