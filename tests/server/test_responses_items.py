"""Responses items <-> neutral chat messages: reading, and writing a plan back."""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.items import MARK, is_responses_body, output_text, to_chat, to_responses
from proxy.items.read import PART_MARK
from proxy.upstream.responses_sse import ResponsesTap, response_error_event


def strip(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat messages without the proxy's marks, for comparing."""
    out = []
    for message in messages:
        m = {k: v for k, v in message.items() if k != MARK}
        if isinstance(m.get("content"), list):
            m["content"] = [{k: v for k, v in p.items() if k != PART_MARK} for p in m["content"]]
        out.append(m)
    return out


AGENT: dict[str, Any] = {
    "model": "gpt-4o",
    "instructions": "You are terse.",
    "input": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "xyz"},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "c1",
            "name": "weather",
            "arguments": '{"city":"Paris"}',
        },
        {
            "type": "function_call",
            "id": "fc_2",
            "call_id": "c2",
            "name": "weather",
            "arguments": '{"city":"Rome"}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "c2", "output": "rain"},
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "q"},
        },
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [
                {"type": "output_text", "text": "Paris sunny, Rome rain.", "annotations": []}
            ],
        },
        {"role": "user", "content": "Thanks. And tomorrow?"},
    ],
    "tools": [
        {
            "type": "function",
            "name": "weather",
            "description": "Weather.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            "strict": True,
        },
        {"type": "web_search"},
    ],
    "tool_choice": {"type": "function", "name": "weather"},
    "max_output_tokens": 500,
    "previous_response_id": None,
}


def test_detects_a_responses_body() -> None:
    assert is_responses_body({"model": "m", "input": "hi"})
    assert is_responses_body({"model": "m", "instructions": "be brief"})
    assert not is_responses_body({"model": "m", "messages": [], "input": "x"})


def test_reads_items_as_chat_messages() -> None:
    conv = to_chat(copy.deepcopy(AGENT))
    assert strip(conv.body["messages"]) == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": "rain"},
        {"role": "system", "content": orjson.dumps(AGENT["input"][6]).decode()},
        {"role": "assistant", "content": "Paris sunny, Rome rain."},
        {"role": "user", "content": "Thanks. And tomorrow?"},
    ]
    # the reasoning item travels with the calls it precedes
    assert [s.items for s in conv.sources] == [[], [0], [1, 2, 3], [4], [5], [6], [7], [8]]
    # Tools go as declared: the chat tokenizer counts every kind (proxy/tokens/tool_kinds.py).
    assert conv.body["tools"] == AGENT["tools"]
    assert conv.body["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert conv.body["max_completion_tokens"] == 500


def test_kept_messages_give_back_the_very_items() -> None:
    body = copy.deepcopy(AGENT)
    conv = to_chat(body)
    out = to_responses(body, conv, list(conv.messages))
    assert out == body
    assert all(a is b for a, b in zip(out["input"], body["input"], strict=True))
    assert orjson.dumps(out) == orjson.dumps(body)


def test_a_dropped_exchange_takes_its_reasoning_and_outputs_along() -> None:
    body = copy.deepcopy(AGENT)
    conv = to_chat(body)
    planned = [m for i, m in enumerate(conv.messages) if i not in (2, 3, 4)]
    out = to_responses(body, conv, planned)
    assert [i.get("type", "message") for i in out["input"]] == [
        "message",
        "web_search_call",
        "message",
        "message",
    ]
    assert out["instructions"] == "You are terse."


def test_edited_messages_keep_their_item_shape() -> None:
    body = copy.deepcopy(AGENT)
    conv = to_chat(body)
    planned = list(conv.messages)
    planned[0] = {**planned[0], "content": "You are terse.\n\nnote"}  # a budget note
    planned[3] = {**planned[3], "content": "[cleared: weather output, 1 token]"}
    planned[6] = {**planned[6], "content": "Paris sunny[…truncated]"}
    planned[5] = {**planned[5], "content": "{}"}  # an opaque item is never edited
    planned.insert(1, {"role": "system", "content": "Summary of earlier turns."})
    out = to_responses(body, conv, planned)
    assert out["instructions"] == "You are terse.\n\nnote"
    items = out["input"]
    assert items[0] == {"type": "message", "role": "system", "content": "Summary of earlier turns."}
    assert items[5] == {
        "type": "function_call_output",
        "call_id": "c1",
        "output": "[cleared: weather output, 1 token]",
    }
    assert items[7] is body["input"][6]
    assert items[8] == {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Paris sunny[…truncated]", "annotations": []}],
    }


def test_string_input_and_parts() -> None:
    body = {"model": "m", "input": "hello"}
    conv = to_chat(body)
    assert to_responses(body, conv, list(conv.messages)) == body
    cut = [{**conv.messages[0], "content": "he[…]"}]
    assert to_responses(body, conv, cut)["input"] == "he[…]"
    image = {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"}
    body = {
        "model": "m",
        "input": [
            {
                "role": "user",
                "x_context": {"section": "memory"},
                "content": [{"type": "input_text", "text": "long text"}, image],
            }
        ],
    }
    conv = to_chat(body)
    parts = conv.messages[0]["content"]
    assert parts[1]["type"] == "image_url" and parts[1]["image_url"]["url"] == "https://x/y.png"
    edited = {**conv.messages[0], "content": [{**parts[0], "text": "long[…]"}, parts[1]]}
    edited.pop("x_context")
    item = to_responses(body, conv, [edited])["input"][0]
    assert item == {"role": "user", "content": [{"type": "input_text", "text": "long[…]"}, image]}
    assert item["content"][1] is image


def test_reasoning_at_the_end_goes_with_what_it_follows_and_is_never_edited() -> None:
    body = {
        "model": "m",
        "input": [{"role": "user", "content": "hi"}, {"type": "reasoning", "id": "rs"}],
    }
    conv = to_chat(body)
    assert len(conv.messages) == 1 and conv.sources[0].items == [0, 1]
    assert to_responses(body, conv, [])["input"] == []
    cut = to_responses(body, conv, [{**conv.messages[0], "content": "h"}])["input"]
    assert cut == [{"role": "user", "content": "h"}, {"type": "reasoning", "id": "rs"}]


def test_text_of_a_response() -> None:
    answer = {
        "output": [
            {"type": "message", "content": [{"type": "output_text", "text": "Hi"}]},
            {"type": "function_call", "name": "f", "arguments": "{}"},
        ]
    }
    assert output_text(answer) == "Hif{}"


def test_responses_tap_relays_every_byte_and_reads_usage() -> None:
    usage = {"input_tokens": 7, "output_tokens": 2, "total_tokens": 9}
    stream = (
        b'event: response.created\ndata: {"type":"response.created","response":{"usage":null}}\n\n'
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"Hi"}\n\n'
        b'event: response.completed\ndata: {"type":"response.completed","response":{"usage":'
        + orjson.dumps(usage)
        + b"}}\n\n"
    )
    for size in (1, 7, len(stream)):
        tap = ResponsesTap()
        out = b"".join(tap.feed(stream[i : i + size]) for i in range(0, len(stream), size))
        assert out + tap.flush() == stream
        assert tap.usage == usage
        assert tap.text() == "Hi"


def test_error_event_is_raised_by_the_openai_sdk() -> None:
    event = response_error_event("broke", "upstream_error", "upstream_stream_broken")
    assert event.startswith(b"event: error\ndata: ")
    data = orjson.loads(event.split(b"data: ", 1)[1])
    assert data["type"] == "error" and data["error"]["code"] == "upstream_stream_broken"


def test_empty_instructions_stay_as_they_came() -> None:
    body = {"model": "m", "instructions": "", "input": "hi"}
    conv = to_chat(body)
    assert orjson.dumps(to_responses(body, conv, list(conv.messages))) == orjson.dumps(body)


def test_instructions_that_are_not_a_string_are_never_edited() -> None:
    body = {"model": "m", "instructions": [{"role": "developer", "content": "x"}], "input": "hi"}
    conv = to_chat(body)
    noted = [
        {**conv.messages[0], "content": conv.messages[0]["content"] + " note"},
        conv.messages[1],
    ]
    assert to_responses(body, conv, noted) == body


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
ITEM = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system", "developer", "tool", "x"])},
        optional={
            "content": JSON
            | st.lists(
                st.fixed_dictionaries(
                    {
                        "type": st.sampled_from(
                            ["input_text", "output_text", "input_image", "refusal", "input_file"]
                        )
                    },
                    optional={"text": JSON, "image_url": JSON, "refusal": JSON},
                ),
                max_size=3,
            ),
            "type": st.just("message"),
        },
    ),
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(
                [
                    "function_call",
                    "function_call_output",
                    "reasoning",
                    "web_search_call",
                    "item_reference",
                ]
            )
        },
        optional={
            "call_id": st.sampled_from(["a", "b", 3]),
            "name": st.just("f"),
            "arguments": st.just("{}"),
            "output": JSON,
            "id": st.text(max_size=4),
        },
    ),
    st.dictionaries(st.text(max_size=6), JSON, max_size=3),
)


@settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    st.lists(ITEM, max_size=12) | st.text(max_size=10),
    st.none() | st.text(max_size=10) | JSON,
    st.data(),
)
def test_any_body_reads_and_writes_back_whole(
    given_input: Any, instructions: Any, data: Any
) -> None:
    """Whatever the items, kept messages give the body back as it came, and dropping any of
    them never splits a call from the items it was read with nor raises."""
    body: dict[str, Any] = {"model": "m", "input": given_input}
    if instructions is not None:
        body["instructions"] = instructions
    conv = to_chat(body)
    assert orjson.dumps(to_responses(body, conv, list(conv.messages))) == orjson.dumps(body)
    assert all(isinstance(m["content"], str | list | None) for m in conv.messages)
    keep = data.draw(
        st.lists(st.booleans(), min_size=len(conv.messages), max_size=len(conv.messages))
    )
    planned = [m for m, k in zip(conv.messages, keep, strict=True) if k]
    out = to_responses(body, conv, planned)
    if isinstance(given_input, list):
        kept = [i for s, k in zip(conv.sources, keep, strict=True) if k for i in s.items]
        assert out["input"] == [given_input[i] for i in sorted(kept)]
        # an edit of every message changes only message and output items, never reasoning
        edited = [{**m, "content": "[edited]"} for m in conv.messages]
        after = to_responses(body, conv, edited)["input"]
        assert len(after) == len(given_input)
        for before, item in zip(given_input, after, strict=True):
            if item is not before:
                assert before.get("type") in (None, "message", "function_call_output")


def test_an_output_whose_call_is_at_the_provider_is_never_dropped() -> None:
    """With previous_response_id the call may be in the previous response: its output is
    opaque (kept, never edited), so the provider never sees a call without its output."""
    output = {"type": "function_call_output", "call_id": "c9", "output": "x" * 50}
    body = {
        "model": "m",
        "previous_response_id": "resp_1",
        "input": [output, {"role": "user", "content": "go on"}],
    }
    conv = to_chat(body)
    assert conv.messages[0]["role"] == "system" and conv.sources[0].kind == "opaque"
    edited = [{**conv.messages[0], "content": "[cleared]"}, conv.messages[1]]
    assert to_responses(body, conv, edited)["input"][0] is output
