"""The SSE tap against hostile streams: every line ending, linear splitting, bounded memory."""

from __future__ import annotations

import re
import time

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.upstream.sse import MAX_EVENT_BYTES, MAX_KEPT_BYTES, StreamTap

USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def payload(text: str) -> bytes:
    return orjson.dumps({"choices": [{"index": 0, "delta": {"content": text}}]})


def held(tap: StreamTap) -> int:
    """Bytes the tap holds: kept events plus the unfinished one (old or new internals)."""
    pending = getattr(tap, "_buf", None)
    if pending is None:
        pending = getattr(tap, "_pending", b"")
    return sum(len(e) for e in tap._events) + len(pending)


def spec_events(stream: bytes) -> list[bytes]:
    """Reference: the stream's events per the SSE spec (lines end in CRLF, LF or CR)."""
    lines = re.findall(rb"[^\r\n]*(?:\r\n|\r|\n)", stream)
    events, current = [], b""
    for line in lines:
        current += line
        if line in (b"\r\n", b"\r", b"\n"):
            events.append(current)
            current = b""
    return events


def test_cr_only_events_are_split_at_once() -> None:
    tap = StreamTap(client_wants_usage=True)
    first = b"data: " + payload("a") + b"\r\r"
    assert tap.feed(first + b"data: [DONE]\r") == first
    assert tap.feed(b"\r") == b"data: [DONE]\r\r"
    assert tap.saw_done and tap.text() == "a"


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    tap = StreamTap(client_wants_usage=True)
    assert tap.feed(b"data: " + payload("a") + b"\r") == b""
    assert tap.feed(b"\ndata: more\r") == b""  # CRLF then a second line: no blank line yet
    assert tap.feed(b"\n\r\n") == b"data: " + payload("a") + b"\r\ndata: more\r\n\r\n"


LINE_ENDS = [b"\n", b"\r", b"\r\n"]
# Two line ends in a row, but never CR then LF: that pair is one line end.
BLANKS = st.sampled_from([a + b for a in LINE_ENDS for b in LINE_ENDS if (a, b) != (b"\r", b"\n")])


@given(
    st.lists(st.tuples(st.text(max_size=6), BLANKS), min_size=1, max_size=10),
    st.lists(st.integers(min_value=0, max_value=500), max_size=8),
)
def test_events_split_per_spec_however_cut(parts: list[tuple[str, bytes]], cuts: list[int]) -> None:
    stream = b"".join(b"data: " + payload(t) + blank for t, blank in parts)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    tap = StreamTap(client_wants_usage=True)
    out = [tap.feed(piece) for piece in pieces]
    assert b"".join(out) + tap.flush() == stream
    # every complete event is out by the time its blank line is in, bar a final lone CR
    expected = spec_events(stream)
    if stream.endswith(b"\r"):
        expected = expected[:-1]
    assert b"".join(out).startswith(b"".join(expected))
    assert tap.text() == "".join(t for t, _ in parts)


def test_long_crlf_event_in_small_chunks_is_linear() -> None:
    # One 900 KB event in 64-byte chunks: the old tap re-joined and re-scanned everything
    # pending on each chunk (about 7 s here); now each byte is looked at a bounded number of times.
    line = b"data: " + b"z" * 100 + b"\r\n"
    body = line * (900_000 // len(line)) + b"\r\n"
    tap = StreamTap(client_wants_usage=True)
    started = time.perf_counter()
    out = [tap.feed(body[i : i + 64]) for i in range(0, len(body), 64)]
    elapsed = time.perf_counter() - started
    assert b"".join(out) == body
    assert elapsed < 2.0, elapsed


def test_endless_stream_keeps_bounded_text() -> None:
    event = b"data: " + payload("w" * 1000) + b"\n\n"
    chunk = event * 64
    tap = StreamTap(client_wants_usage=True)
    total = 0
    peak = 0
    for _ in range((64 * 1024 * 1024) // len(chunk)):  # 64 MiB, no usage, no end
        assert tap.feed(chunk) == chunk
        total += len(chunk)
        peak = max(peak, held(tap))
    assert peak <= MAX_KEPT_BYTES + len(chunk)
    text = tap.text()
    assert 0 < len(text) <= MAX_KEPT_BYTES
    beyond = tap.estimated_chars_beyond(text)
    assert 0.9 * total * 1000 / len(event) < len(text) + beyond < 1.1 * total * 1000 / len(event)


def test_endless_event_passes_through_unparsed_and_bounded() -> None:
    tap = StreamTap(client_wants_usage=True)
    start = b'data: {"choices": [{"delta": {"content": "'
    out = [tap.feed(start)]
    piece = b"y" * 65536
    peak = 0
    for _ in range((48 * 1024 * 1024) // len(piece)):  # 48 MiB, never a blank line
        out.append(tap.feed(piece))
        peak = max(peak, held(tap))
    assert peak <= MAX_EVENT_BYTES + len(piece)
    end = b'"}}]}\r\n\r\n'
    usage = b"data: " + orjson.dumps({"choices": [], "usage": USAGE}) + b"\r\n\r\n"
    out.append(tap.feed(end + usage))
    out.append(tap.flush())
    sent = b"".join(out)
    assert sent == start + piece * ((48 * 1024 * 1024) // len(piece)) + end + usage
    assert tap.usage == USAGE  # parsing resumes after the over-long event


def test_the_lf_of_a_crlf_split_from_its_cr_goes_out_with_it() -> None:
    """An event ended by a CR at a chunk's end, its CRLF's LF in the next chunk: the LF goes
    out at once (it completes that event's end), not held for the next event."""
    tap = StreamTap(client_wants_usage=True)
    first = tap.feed(b'data: {"a":1}\n\r')
    assert first == b'data: {"a":1}\n\r'
    assert tap.feed(b"\n") == b"\n"
    assert tap.feed(b'data: {"b":2}\r\n\r\n') == b'data: {"b":2}\r\n\r\n'
    assert tap.flush() == b""
