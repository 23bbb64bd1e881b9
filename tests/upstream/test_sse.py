"""The SSE tap: events passed on whole, usage read, the unrequested usage chunk withheld."""

from __future__ import annotations

import re

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.upstream.sse import StreamTap, error_event


def event(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


CHUNKS = [
    event({"choices": [{"index": 0, "delta": {"content": "Hel"}}], "usage": None}),
    event({"choices": [{"index": 0, "delta": {"content": "lo"}}], "usage": None}),
    event(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
                }
            ],
            "usage": None,
        }
    ),
    event(
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
    ),
    b"data: [DONE]\n\n",
]
STREAM = b"".join(CHUNKS)


def run(tap: StreamTap, pieces: list[bytes]) -> bytes:
    return b"".join(tap.feed(p) for p in pieces) + tap.flush()


def test_client_that_asked_sees_everything() -> None:
    tap = StreamTap(client_wants_usage=True)
    assert run(tap, [STREAM]) == STREAM
    assert tap.usage == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert tap.text() == "Hellof{}"
    assert tap.saw_done


def test_client_that_did_not_ask_sees_the_plain_stream() -> None:
    tap = StreamTap(client_wants_usage=False)
    out = run(tap, [STREAM])
    assert b'"usage"' not in out
    assert out.endswith(b"data: [DONE]\n\n")
    assert out.count(b"data: ") == 4
    assert tap.usage is not None and tap.usage["total_tokens"] == 5


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=20))
def test_split_anywhere_gives_same_output(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    pieces = [STREAM[a:b] for a, b in zip([0, *points], [*points, len(STREAM)], strict=True)]
    tap = StreamTap(client_wants_usage=False)
    whole = StreamTap(client_wants_usage=False)
    assert run(tap, pieces) == run(whole, [STREAM])
    assert tap.usage == whole.usage


def test_crlf_events_and_non_json_pass_through() -> None:
    raw = b'event: ping\r\ndata: hello\r\n\r\n: comment\n\ndata: {"a": 1}\n\n'
    tap = StreamTap(client_wants_usage=False)
    assert run(tap, [raw]) == raw
    assert tap.usage is None


def test_unterminated_tail_is_flushed() -> None:
    tap = StreamTap(client_wants_usage=True)
    assert tap.feed(b"data: [DONE]") == b""
    assert tap.flush() == b"data: [DONE]"


def test_error_event_is_openai_shaped() -> None:
    raw = error_event("broke", "upstream_error", "upstream_stream_broken")
    assert raw.startswith(b"data: ") and raw.endswith(b"\n\n")
    assert orjson.loads(raw[6:])["error"]["code"] == "upstream_stream_broken"


class OneByOne(StreamTap):
    """The tap as it was: every event found and looked at on its own (the reference)."""

    def __init__(self, client_wants_usage: bool) -> None:
        super().__init__(client_wants_usage)
        self._rest = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._rest + chunk
        out: list[bytes] = []
        start = 0
        for match in re.finditer(rb"\r?\n\r?\n", data):
            kept = self._inspect(data[start : match.end()])
            start = match.end()
            if kept:
                out.append(kept)
        self._rest = data[start:]
        return b"".join(out)

    def flush(self) -> bytes:
        rest, self._rest = self._rest, b""
        return self._inspect(rest) if rest.strip() else rest


def content_event(text: str, usage_null: bool) -> bytes:
    body: dict[str, object] = {"choices": [{"index": 0, "delta": {"content": text}}]}
    if usage_null:
        body["usage"] = None
    return event(body)


EVENTS = st.one_of(
    st.builds(content_event, st.text(max_size=12) | st.just("[DONE] usage"), st.booleans()),
    st.just(event({"choices": [], "usage": {"prompt_tokens": 1, "total_tokens": 2}})),
    st.just(
        event(
            {
                "choices": [{"index": 0, "delta": {"content": "x"}}],
                "usage": {"prompt_tokens": 4, "total_tokens": 6},
            }
        )
    ),
    st.just(b"data: [DONE]\n\n"),
    st.just(b": keep-alive\n\n"),
    st.just(b"event: ping\ndata: {}\n\n"),
    st.just(b"data: not json\n\n"),
)


@given(
    st.lists(EVENTS, max_size=12),
    st.lists(st.integers(min_value=0, max_value=2000), max_size=8),
    st.booleans(),
    st.booleans(),
)
def test_runs_of_events_pass_as_one_by_one(
    events: list[bytes], cuts: list[int], wants_usage: bool, tail: bool
) -> None:
    # The tap passes the runs of events between those it must look at (a usage object,
    # [DONE]) in one piece: the client gets the same bytes, and the tap the same usage,
    # [DONE] and text, as when every event is looked at, however the stream is cut.
    stream = b"".join(events) + (b"data: [DONE]" if tail else b"")
    points = sorted({c % (len(stream) + 1) for c in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    runs, reference = StreamTap(wants_usage), OneByOne(wants_usage)
    assert run(runs, pieces) == run(reference, pieces)
    assert (runs.usage, runs.saw_done) == (reference.usage, reference.saw_done)
    assert runs.text() == reference.text()
