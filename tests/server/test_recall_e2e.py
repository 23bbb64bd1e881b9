"""The proxy's recall tool end to end: a trimmed request declares `context_recall`, a model
(tests/fake_recall.py) calls it, the proxy answers from the request in flight and goes on;
the client gets one answer, through the official SDKs, plain and streamed, never the tool.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.fake_messages import problem
from tests.fake_recall import BEFORE_CALL
from tests.fake_upstream import FakeUpstream
from tests.server.test_proxy_e2e import usage_rows

WINDOW = 2048
SECRET = "The vault code is 7-4-1-9."  # said early; trimmed away; asked for at the end


def chat_history(turns: int = 24) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for n in range(turns):
        said = SECRET if n == 1 else f"Note {n}: " + "the weather was mild and grey. " * 12
        messages.append({"role": "user", "content": said})
        messages.append({"role": "assistant", "content": f"Noted {n}. " + "fine " * 40})
    messages.append({"role": "user", "content": "What was the vault code I gave you?"})
    return messages


def _policy(policies_dir: Path, extra: str = "") -> None:
    """Relevance off: the planner keeps the newest turns, so the early secret is left out
    whatever the question says (and only the recall can bring it back)."""
    (policies_dir / "default.yaml").write_text(
        f"models:\n  gpt-4o-mini: {{context_window: {WINDOW}}}\n"
        f"  claude-sonnet-4-6: {{context_window: {WINDOW}}}\n"
        f"history: {{relevance: off}}\n{extra}"
    )


def test_a_chat_answer_that_calls_recall_is_continued_with_what_was_left_out(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    _policy(policies_dir)
    upstream.mode = "recall"
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0)
    reply = sdk.chat.completions.with_raw_response.create(
        model="gpt-4o-mini",
        messages=chat_history(),  # type: ignore[arg-type]
    )
    answer = reply.parse()
    text = answer.choices[0].message.content or ""
    assert text.startswith(BEFORE_CALL) and "RECALLED:" in text and "7-4-1-9" in text
    assert answer.choices[0].finish_reason == "stop" and not answer.choices[0].message.tool_calls
    first, second = (r.json() for r in upstream.chat_requests)
    assert [t["function"]["name"] for t in first["tools"]] == ["context_recall"]
    assert second["messages"][: len(first["messages"])] == first["messages"]  # same prefix
    assert second["messages"][-1]["role"] == "tool"
    row = usage_rows(proxy)[-1]
    assert row["recall_rounds"] == 1 and row["recalled_tokens"] > 0
    assert row["prompt_tokens"] == 200 and row["completion_tokens"] == 20  # both rounds


def test_a_request_within_budget_goes_as_it_came_without_the_tool(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    _policy(policies_dir)
    upstream.mode = "recall"
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0)
    short = [{"role": "user", "content": "Hello there."}]
    sdk.chat.completions.create(model="gpt-4o-mini", messages=short)  # type: ignore[arg-type]
    sent = upstream.chat_requests[-1].json()
    assert sent == {"model": "gpt-4o-mini", "messages": short}


def test_a_chat_stream_passes_text_at_once_and_never_shows_the_tool(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    _policy(policies_dir)
    upstream.mode = "recall"
    # The fake sends the call only once the client has read the text before it: a proxy
    # that held the text back until the call was whole would leave this unset.
    upstream.text_read = read = threading.Event()
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0)
    texts: list[str] = []
    ids, roles, finishes = set(), 0, []
    usage = None
    with sdk.chat.completions.create(
        model="gpt-4o-mini", messages=chat_history(), stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True},
    ) as stream:  # fmt: skip
        for chunk in stream:
            ids.add(chunk.id)
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                assert not choice.delta.tool_calls, "the client saw the recall call"
                roles += choice.delta.role is not None
                if choice.delta.content:
                    texts.append(choice.delta.content)
                    if "".join(texts).startswith(BEFORE_CALL):
                        read.set()
                if choice.finish_reason:
                    finishes.append(choice.finish_reason)
    text = "".join(texts)
    assert text.startswith(BEFORE_CALL) and "7-4-1-9" in text
    assert len(ids) == 1 and roles == 1 and finishes == ["stop"]
    assert usage is not None and usage.prompt_tokens == 200 and usage.completion_tokens == 20
    # The words before the call reached the client before the upstream sent the call.
    assert upstream.text_read_in_time, "the text waited for the recall call"
    assert usage_rows(proxy)[-1]["recall_rounds"] == 1


def test_a_call_of_the_clients_tool_beside_the_recall_goes_to_the_client_alone(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    _policy(policies_dir)
    upstream.mode = "recall_mixed"
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0)
    tools = [
        {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
    ]
    answer = sdk.chat.completions.create(
        model="gpt-4o-mini",
        messages=chat_history(),
        tools=tools,  # type: ignore[arg-type]
    )
    calls = answer.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["weather"]  # type: ignore[union-attr]
    assert answer.choices[0].finish_reason == "tool_calls"
    assert len(upstream.chat_requests) == 1  # not continued: the client runs its tool
    # Streamed: the client's call at index 0, the recall's withheld.
    indexes, names = [], []
    for chunk in sdk.chat.completions.create(
        model="gpt-4o-mini",
        messages=chat_history(),
        tools=tools,
        stream=True,  # type: ignore[arg-type]
    ):
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or ():
                indexes.append(call.index)
                if call.function and call.function.name:
                    names.append(call.function.name)
    assert names == ["weather"] and set(indexes) == {0}


def test_a_model_that_keeps_asking_stops_at_the_bound(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    _policy(policies_dir, "recall: {rounds: 2}\n")
    upstream.mode = "recall_forever"
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0)
    answer = sdk.chat.completions.create(model="gpt-4o-mini", messages=chat_history())  # type: ignore[arg-type]
    assert len(upstream.chat_requests) == 3  # the first call and two continuations
    assert not answer.choices[0].message.tool_calls
    assert answer.choices[0].finish_reason == "stop"
    assert usage_rows(proxy)[-1]["recall_rounds"] == 2


def test_recall_off_declares_nothing(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    _policy(policies_dir, "recall: {tool: off}\n")
    upstream.mode = "recall"
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0)
    sdk.chat.completions.create(model="gpt-4o-mini", messages=chat_history())  # type: ignore[arg-type]
    assert "tools" not in upstream.chat_requests[-1].json()


@pytest.mark.parametrize("stream", [False, True])
def test_responses_recall_through_the_openai_sdk(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, stream: bool
) -> None:
    _policy(policies_dir)
    upstream.mode = "recall"
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0)
    history = chat_history()
    items = [{"role": m["role"], "content": m["content"]} for m in history[1:]]
    if stream:
        with sdk.responses.stream(
            model="gpt-4o-mini",
            instructions="You are helpful.",
            input=items,  # type: ignore[arg-type]
        ) as events:
            seen = [e.type for e in events]
            final = events.get_final_response()
        assert seen.count("response.created") == 1 and seen.count("response.completed") == 1
    else:
        final = sdk.responses.create(
            model="gpt-4o-mini",
            instructions="You are helpful.",
            input=items,  # type: ignore[arg-type]
        )
    assert "7-4-1-9" in final.output_text and final.output_text.startswith(BEFORE_CALL)
    assert not [o for o in final.output if o.type == "function_call"]
    assert final.usage is not None and final.usage.input_tokens == 200
    second = upstream.responses_requests[-1].json()
    assert second["input"][-1]["type"] == "function_call_output"
    assert usage_rows(proxy)[-1]["recall_rounds"] == 1


@pytest.mark.parametrize("stream", [False, True])
def test_messages_recall_through_the_anthropic_sdk(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, fake_upstream_server: Any,
    stream: bool,
) -> None:  # fmt: skip
    _, base = fake_upstream_server
    _policy(
        policies_dir, f"upstream: {{anthropic: {{base_url: '{base}'}}}}\nrecall: {{tool: on}}\n"
    )
    upstream.mode = "recall"
    proxy = start_proxy()
    sdk = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-client", max_retries=0)
    history = chat_history()
    messages = [{"role": m["role"], "content": m["content"]} for m in history[1:]]
    kwargs: dict[str, Any] = {"model": "claude-sonnet-4-6", "max_tokens": 256,
                              "system": "You are helpful.", "messages": messages}  # fmt: skip
    if stream:
        with sdk.messages.stream(**kwargs) as events:
            kinds = [e.type for e in events]
            final = events.get_final_message()
        assert kinds.count("message_start") == 1 and kinds.count("message_stop") == 1
    else:
        final = sdk.messages.create(**kwargs)
    text = "".join(b.text for b in final.content if b.type == "text")
    assert text.startswith(BEFORE_CALL) and "7-4-1-9" in text
    assert not [b for b in final.content if b.type == "tool_use"]
    assert final.stop_reason == "end_turn"
    assert final.usage.input_tokens == 200 and final.usage.output_tokens == 20
    for rec in upstream.messages_requests:
        assert problem(rec.json()) is None  # every body one the API accepts
    assert usage_rows(proxy)[-1]["recall_rounds"] == 1
