"""Stream splicers (hypothesis): random rounds of text, recall calls and client calls in
each API's events, spliced as the server splices them (recall_step.stream_rounds), then
read back as the client reads them. Whatever the model did, the client sees one stream:
one start, one end, every word of text in order, no sign of the recall tool, its own calls
numbered from 0, sequence numbers and indices without a gap, usage summed over rounds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.recall import APIS, EventSplitter, Splicer
from proxy.recall.events import parse

TOOL = "context_recall"


@dataclass
class Said:
    """One round of an answer: words, recall calls, client calls."""

    words: list[str]
    recalls: int
    clients: int


rounds = st.lists(
    st.builds(
        Said,
        st.lists(st.sampled_from(["alpha", "beta", "ok", "naïve", "日本"]), max_size=4),
        st.integers(0, 2),
        st.integers(0, 2),
    ),
    min_size=1,
    max_size=4,
)
chunkings = st.integers(1, 97)  # the byte size the upstream's stream arrives in


def _chat_events(n: int, said: Said) -> list[bytes]:
    base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> bytes:
        data = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **more}
        return b"data: " + orjson.dumps(data) + b"\n\n"

    out = [chunk({"role": "assistant", "content": ""}, usage=None)]
    out += [chunk({"content": w + " "}, usage=None) for w in said.words]
    calls = [TOOL] * said.recalls + ["weather"] * said.clients
    for index, name in enumerate(calls):
        head = {"index": index, "id": f"call_{n}_{index}", "type": "function",
                "function": {"name": name, "arguments": ""}}  # fmt: skip
        out.append(chunk({"tool_calls": [head]}, usage=None))
        out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": "{}"}}]}))
    out.append(chunk({}, "tool_calls" if calls else "stop", usage=None))
    usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    out.append(b"data: " + orjson.dumps({**base, "choices": [], "usage": usage}) + b"\n\n")
    return [*out, b"data: [DONE]\n\n"]


def _responses_events(n: int, said: Said) -> list[bytes]:
    seq = 0

    def event(kind: str, **data: Any) -> bytes:
        nonlocal seq
        seq += 1
        body = {"type": kind, "sequence_number": seq - 1, **data}
        return f"event: {kind}\ndata: ".encode() + orjson.dumps(body) + b"\n\n"

    items: list[dict[str, Any]] = []
    if said.words:
        text = " ".join(said.words)
        items.append({"type": "message", "id": f"msg_{n}", "role": "assistant",
                      "content": [{"type": "output_text", "text": text}]})  # fmt: skip
    for k, name in enumerate([TOOL] * said.recalls + ["weather"] * said.clients):
        items.append({"type": "function_call", "id": f"fc_{n}_{k}", "call_id": f"c{n}{k}",
                      "name": name, "arguments": "{}"})  # fmt: skip
    response = {"id": f"resp_{n}", "object": "response", "status": "in_progress", "output": []}
    out = [event("response.created", response=response)]
    out.append(event("response.in_progress", response=response))
    for index, item in enumerate(items):
        out.append(event("response.output_item.added", output_index=index, item=item))
        if item["type"] == "message":
            for w in said.words:
                out.append(event("response.output_text.delta", output_index=index,
                                 item_id=item["id"], content_index=0, delta=w + " "))  # fmt: skip
        out.append(event("response.output_item.done", output_index=index, item=item))
    usage = {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110}
    done = {**response, "status": "completed", "output": items, "usage": usage}
    return [*out, event("response.completed", response=done)]


def _messages_events(n: int, said: Said) -> list[bytes]:
    def event(kind: str, **data: Any) -> bytes:
        return f"event: {kind}\ndata: ".encode() + orjson.dumps({"type": kind, **data}) + b"\n\n"

    usage = {"input_tokens": 100, "output_tokens": 1}
    out = [event("message_start", message={"id": f"msg_{n}", "role": "assistant", "content": [],
                                            "usage": usage})]  # fmt: skip
    index = 0
    if said.words:
        out.append(
            event("content_block_start", index=0, content_block={"type": "text", "text": ""})
        )
        out += [event("content_block_delta", index=0, delta={"type": "text_delta", "text": w + " "})
                for w in said.words]  # fmt: skip
        out.append(event("content_block_stop", index=0))
        index = 1
    for k, name in enumerate([TOOL] * said.recalls + ["weather"] * said.clients):
        block = {"type": "tool_use", "id": f"tu_{n}_{k}", "name": name, "input": {}}
        out.append(event("content_block_start", index=index, content_block=block))
        delta = {"type": "input_json_delta", "partial_json": "{}"}
        out.append(event("content_block_delta", index=index, delta=delta))
        out.append(event("content_block_stop", index=index))
        index += 1
    stop = "tool_use" if said.recalls + said.clients else "end_turn"
    out.append(event("message_delta", delta={"stop_reason": stop}, usage={"output_tokens": 10}))
    return [*out, event("message_stop")]


EVENTS = {"chat": _chat_events, "responses": _responses_events, "messages": _messages_events}


def splice(api: str, said: list[Said], size: int) -> tuple[list[Any], int]:
    """What the client gets, as `recall_step.stream_rounds` would give it (rounds continued
    while a round called only the recall tool), parsed; and how many rounds ran."""
    splicer: Splicer = APIS[api].splicer()
    out = b""
    ran = 0
    for n, round_ in enumerate(said):
        ran += 1
        raw = b"".join(EVENTS[api](n, round_))
        split = EventSplitter()
        for start in range(0, len(raw), size):
            for event in split.feed(raw[start : start + size]):
                out += splicer.feed(event)
        if not splicer.recalled.only_recall or n == len(said) - 1:
            break
        splicer.next_round()
    out += splicer.closing()
    split = EventSplitter()
    return [parse(e) for e in split.feed(out)], ran


def _expected_words(said: list[Said], ran: int) -> str:
    return "".join(w + " " for s in said[:ran] for w in s.words)


@settings(max_examples=150, deadline=None)
@given(rounds, chunkings)
def test_a_chat_stream_reads_as_one(said: list[Said], size: int) -> None:
    events, ran = splice("chat", said, size)
    data = [d for _, d in events]
    assert data[-1] == "[DONE]" and data.count("[DONE]") == 1
    chunks = [d for d in data if isinstance(d, dict)]
    assert {c["id"] for c in chunks} == {"chatcmpl-0"}
    deltas = [ch["delta"] for c in chunks for ch in c["choices"]]
    assert sum("role" in d for d in deltas) == 1
    assert "".join(d.get("content") or "" for d in deltas) == _expected_words(said, ran)
    calls = [tc for d in deltas for tc in d.get("tool_calls") or ()]
    names = [tc["function"]["name"] for tc in calls if tc["function"].get("name")]
    assert TOOL not in names and len(names) == said[ran - 1].clients
    assert sorted({tc["index"] for tc in calls}) == list(range(len(names)))
    finishes = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
    assert finishes == ["tool_calls" if names else "stop"]
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert usage == [{"prompt_tokens": 100 * ran, "completion_tokens": 10 * ran,
                      "total_tokens": 110 * ran}]  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(rounds, chunkings)
def test_a_responses_stream_reads_as_one(said: list[Said], size: int) -> None:
    events, ran = splice("responses", said, size)
    data = [d for _, d in events]
    assert [d["sequence_number"] for d in data] == list(range(len(data)))
    kinds = [d["type"] for d in data]
    assert kinds.count("response.created") == 1 and kinds[-1] == "response.completed"
    assert kinds.count("response.completed") == 1
    added = [d for d in data if d["type"] == "response.output_item.added"]
    assert [d["output_index"] for d in added] == list(range(len(added)))
    assert all(d["item"].get("name") != TOOL for d in added)
    text = "".join(d["delta"] for d in data if d["type"] == "response.output_text.delta")
    assert text == _expected_words(said, ran)
    final = data[-1]["response"]
    assert final["id"] == "resp_0" and all(i.get("name") != TOOL for i in final["output"])
    assert len(final["output"]) == len(added)
    assert final["usage"]["input_tokens"] == 100 * ran


@settings(max_examples=150, deadline=None)
@given(rounds, chunkings)
def test_a_messages_stream_reads_as_one(said: list[Said], size: int) -> None:
    events, ran = splice("messages", said, size)
    data = [d for _, d in events]
    kinds = [d["type"] for d in data]
    assert kinds[0] == "message_start" and kinds.count("message_start") == 1
    assert kinds[-1] == "message_stop" and kinds.count("message_stop") == 1
    assert kinds.count("message_delta") == 1
    starts = [d for d in data if d["type"] == "content_block_start"]
    assert [d["index"] for d in starts] == list(range(len(starts)))
    assert all(d["content_block"].get("name") != TOOL for d in starts)
    open_blocks = {d["index"] for d in starts}
    assert all(d["index"] in open_blocks for d in data if d["type"].startswith("content_block"))
    text = "".join(d["delta"].get("text", "") for d in data if d["type"] == "content_block_delta")
    assert text == _expected_words(said, ran)
    delta = next(d for d in data if d["type"] == "message_delta")
    clients = said[ran - 1].clients
    assert delta["delta"]["stop_reason"] == ("tool_use" if clients else "end_turn")
    assert (
        delta["usage"]["output_tokens"] == 10 * ran and delta["usage"]["input_tokens"] == 100 * ran
    )
