"""End to end: the official openai client's Responses API through the proxy to the fake."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.items import to_chat
from proxy.policy import load_policy_dir
from proxy.tokens import TokenCounter
from tests import fake_responses
from tests.conftest import RunningProxy
from tests.fake_upstream import FakeUpstream
from tests.server.test_proxy_e2e import CONTEXT_HEADERS, client, usage_rows

SMALL_WINDOW = "models:\n  gpt-4o: {context_window: 4000}\n"
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
]


def filler(i: int, words: int) -> str:
    return " ".join(f"{WORDS[(i + k) % len(WORDS)]}{(i * 7 + k) % 97}" for k in range(words))


def conversation(turns: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for i in range(turns):
        items.append({"role": "user", "content": f"Question {i}: {filler(i, 60)}"})
        items.append(
            {
                "type": "message",
                "id": f"msg_{i}",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {
                        "type": "output_text",
                        "text": f"Answer {i}: {filler(i + 1, 60)}",
                        "annotations": [],
                    }
                ],
            }
        )
    items.append({"role": "user", "content": "Last question: what did we decide about delta?"})
    return items


def agent_loop(calls: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "Read every file and fix the bug."}]
    for i in range(calls):
        if i % 5 == 0:
            items.append(
                {"type": "reasoning", "id": f"rs_{i}", "summary": [], "encrypted_content": "enc"}
            )
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{i}",
                "call_id": f"call_{i}",
                "name": "read_file",
                "arguments": orjson.dumps({"path": f"src/file_{i}.py"}).decode(),
                "status": "completed",
            }
        )
        items.append(
            {
                "type": "function_call_output",
                "call_id": f"call_{i}",
                "output": f"file {i}: {filler(i, 120)}",
            }
        )
    return items


TOOLS = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    }
]


def forwarded_count(policies: Path, body: dict[str, Any]) -> int:
    """The forwarded Responses body's tokens, counted again the proxy's way (independently
    of the headers the proxy reports)."""
    policy = load_policy_dir(str(policies)).default
    tokenizer = TokenCounter().for_model("gpt-4o", policy)
    return tokenizer.count_request(to_chat(body).body)


def assert_pairs_and_fit(proxy_headers: Any, sent: dict[str, Any], policies: Path) -> None:
    items = sent["input"]
    calls = {i["call_id"] for i in items if i.get("type") == "function_call"}
    outputs = {i["call_id"] for i in items if i.get("type") == "function_call_output"}
    assert calls == outputs
    budget = int(proxy_headers["x-context-budget"])
    assert int(proxy_headers["x-context-tokens-after"]) <= budget
    assert forwarded_count(policies, sent) <= budget
    assert int(proxy_headers["x-context-trimmed"]) > 0
    for name in CONTEXT_HEADERS:
        assert proxy_headers.get(name), name


def test_plain_create(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    raw = client(proxy).responses.with_raw_response.create(
        model="gpt-4o", instructions="Be brief.", input="Say hello."
    )
    answer = raw.parse()
    assert answer.output_text == upstream.reply_text
    for name in CONTEXT_HEADERS:
        assert raw.headers.get(name), name
    assert raw.headers["x-context-trimmed"] == "0"
    sent = upstream.last
    assert sent.path == "/v1/responses"
    assert sent.json()["input"] == "Say hello." and sent.json()["instructions"] == "Be brief."
    row = usage_rows(proxy)[-1]
    assert row["api"] == "responses" and row["status"] == 200 and row["stream"] is False
    assert row["usage_source"] == "upstream"
    assert row["prompt_tokens"] == len(sent.body) // 4 + 3  # the fake's own figure
    assert row["completion_tokens"] == len(upstream.reply_text.split())
    assert row["cached_tokens"] == 2  # input_tokens_details.cached_tokens
    assert row["tokens_before"] == int(raw.headers["x-context-tokens-before"]) > 0


def test_within_budget_forwarded_byte_for_byte(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    body = (
        b'{"model": "gpt-4o",  "instructions": "caf\\u00e9",'
        b' "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}], "x": 1.50}'
    )
    response = httpx.post(
        proxy.url + "/responses", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 200
    assert upstream.last.body == body


def test_over_budget_conversation(
    start_proxy: Any, policies_dir: Path, upstream: FakeUpstream
) -> None:
    (policies_dir / "default.yaml").write_text(SMALL_WINDOW)
    proxy = start_proxy()
    items = conversation(40)
    raw = client(proxy).responses.with_raw_response.create(
        model="gpt-4o",
        instructions="You are a helpful assistant.",
        input=items,
        max_output_tokens=300,
    )
    assert raw.parse().output_text == upstream.reply_text
    sent = upstream.last.json()
    assert_pairs_and_fit(raw.headers, sent, policies_dir)
    assert sent["input"][-1] == items[-1]
    assert sent["instructions"] == "You are a helpful assistant."
    kept = [i for i in sent["input"] if i in items]
    assert len(kept) < len(items)
    row = usage_rows(proxy)[-1]
    assert row["api"] == "responses" and row["prompt_tokens"] == len(upstream.last.body) // 4 + 3
    assert row["dropped"] + row["truncated"] + row["summarized"] > 0


def said(sent: dict[str, Any]) -> list[dict[str, Any]]:
    """The items sent but the proxy's quoted recall of old tool results, which follows the
    newest output when the newest calls name what an older result held."""
    recall = "[context-proxy: tool results recalled"
    return [i for i in sent["input"] if not str(i.get("content", "")).startswith(recall)]


def create_loop(proxy: RunningProxy, items: list[dict[str, Any]]) -> Any:
    """The agent loop's next step sent through the proxy: the raw answer, a 200."""
    raw = client(proxy).responses.with_raw_response.create(
        model="gpt-4o",
        input=items,  # type: ignore[arg-type]
        tools=TOOLS,  # type: ignore[arg-type]
        max_output_tokens=300,
    )
    assert raw.http_response.status_code == 200
    return raw


def test_over_budget_agent_loop(
    start_proxy: Any, policies_dir: Path, upstream: FakeUpstream
) -> None:
    (policies_dir / "default.yaml").write_text(SMALL_WINDOW)
    proxy = start_proxy()
    items = agent_loop(40)
    raw = create_loop(proxy, items)
    answer = raw.parse()
    assert "Tool said" in answer.output_text  # the last output reached the model
    sent = upstream.last.json()
    assert_pairs_and_fit(raw.headers, sent, policies_dir)
    assert sent["input"][0] == items[0]  # the one user message, intact
    assert said(sent)[-1] == items[-1]
    # every reasoning item still precedes a call, as it did
    for k, item in enumerate(sent["input"]):
        if item.get("type") == "reasoning":
            assert sent["input"][k + 1]["type"] == "function_call"
    row = usage_rows(proxy)[-1]
    assert row["api"] == "responses" and row["status"] == 200
    assert row["prompt_tokens"] == len(upstream.last.body) // 4 + 3


def test_old_json_outputs_reach_the_model_compacted_before_anything_is_cut(
    start_proxy: Any, policies_dir: Path, upstream: FakeUpstream
) -> None:
    """An agent loop over budget whose tools answer in indented JSON: old outputs kept go
    as the same JSON without spaces (none with its spaces), the newest exchanges as sent."""
    (policies_dir / "default.yaml").write_text(SMALL_WINDOW)
    proxy = start_proxy()
    items = agent_loop(14)
    for k, item in enumerate(items):
        if item.get("type") == "function_call_output":
            record = {"path": f"src/file_{k}.py", "lines": 120, "words": filler(k, 40).split()}
            item["output"] = json.dumps(record, indent=4)
    raw = create_loop(proxy, items)
    sent = upstream.last.json()
    assert_pairs_and_fit(raw.headers, sent, policies_dir)
    outputs = {i["call_id"]: i for i in items if i.get("type") == "function_call_output"}
    forwarded = [i for i in sent["input"] if i.get("type") == "function_call_output"]
    newest = list(outputs)[-3:]
    assert [f["call_id"] for f in forwarded[-3:]] == newest
    compacted = 0
    for f in forwarded:
        came = outputs[f["call_id"]]
        if f["call_id"] in newest:
            assert f == came
        elif f["output"].startswith("{"):  # kept: the same JSON, its spaces gone
            assert f["output"] == json.dumps(json.loads(came["output"]), separators=(",", ":"))
            compacted += 1
        else:  # cut to make room for the steps ahead (cache mode)
            assert f["output"].startswith("[context-proxy: result of read_file")
    assert compacted >= 3


def test_over_budget_agent_loop_streamed(
    start_proxy: Any, policies_dir: Path, upstream: FakeUpstream
) -> None:
    """The same loop with responses.stream: trimmed to fit, every event relayed, one
    usage row with the exact input tokens and the x-context headers."""
    (policies_dir / "default.yaml").write_text(SMALL_WINDOW)
    proxy = start_proxy()
    items = agent_loop(40)
    with client(proxy).responses.stream(
        model="gpt-4o", input=items, tools=TOOLS, max_output_tokens=300
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "Tool said" in final.output_text
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    sent = upstream.last.json()
    assert sent["input"][0] == items[0] and said(sent)[-1] == items[-1]
    assert len(upstream.last.body) < len(orjson.dumps(items))  # trimmed
    with httpx.stream(
        "POST", proxy.url + "/v1/responses",
        json={"model": "gpt-4o", "input": items, "tools": TOOLS, "max_output_tokens": 300,
              "stream": True},
    ) as response:  # fmt: skip
        assert int(response.headers["x-context-trimmed"]) > 0
        assert int(response.headers["x-context-tokens-after"]) <= int(
            response.headers["x-context-budget"]
        )
        b"".join(response.iter_bytes())
    rows = usage_rows(proxy, at_least=2)
    assert all(r["api"] == "responses" and r["stream"] for r in rows[-2:])
    assert rows[-1]["prompt_tokens"] == len(upstream.last.body) // 4 + 3


def test_stream_relays_every_event(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    with client(proxy).responses.stream(model="gpt-4o", input="Say hello.") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert final.output_text == upstream.reply_text
    sent = upstream.last
    answer = fake_responses.response(sent.json(), upstream.reply_text, len(sent.body), "{}")
    events = asyncio.run(_events(answer))
    assert kinds == [orjson.loads(e.split(b"data: ", 1)[1])["type"] for e in events]
    # byte for byte, too
    with httpx.stream("POST", proxy.url + "/v1/responses", content=sent.body) as response:
        assert response.headers["x-context-trimmed"] == "0"
        relayed = b"".join(response.iter_bytes())
    assert relayed == b"".join(events)
    rows = usage_rows(proxy, at_least=2)
    assert [r["stream"] for r in rows] == [True, True]
    assert all(r["api"] == "responses" and r["usage_source"] == "upstream" for r in rows)
    assert rows[-1]["prompt_tokens"] == len(upstream.last.body) // 4 + 3
    assert rows[-1]["cached_tokens"] == 2


async def _events(answer: dict[str, Any]) -> list[bytes]:
    return [e async for e in fake_responses.events(answer, broken=False)]


def test_broken_stream_ends_with_an_error_the_sdk_raises(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    upstream.mode = "break"
    with (
        pytest.raises(openai.APIError) as caught,
        client(proxy).responses.stream(model="gpt-4o", input="Say hello.") as stream,
    ):
        for _ in stream:
            pass
    assert "ended abnormally" in str(caught.value)
    row = usage_rows(proxy)[-1]
    assert row["status"] == 502 and row["error"] == "upstream_stream_broken"
    assert row["api"] == "responses"


def test_answers_without_usage_are_estimated(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    upstream.mode = "no_usage"
    plain = client(proxy).responses.create(model="gpt-4o", input="Say hello.")
    assert plain.output_text == upstream.reply_text
    with client(proxy).responses.stream(model="gpt-4o", input="Say hello.") as stream:
        assert [e.type for e in stream][-1] == "response.completed"
    policy = load_policy_dir(str(proxy.settings.policies)).default
    reply = TokenCounter().for_model("gpt-4o", policy).count_text(upstream.reply_text)
    rows = usage_rows(proxy, at_least=2)
    for row in rows:
        assert row["usage_source"] == "estimated" and row["api"] == "responses"
        assert row["completion_tokens"] == reply  # the reply's tokens, counted by the proxy
        assert row["prompt_tokens"] == row["tokens_after"] > 0


def test_upstream_error_passes_through(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    upstream.mode = "error"
    response = httpx.post(proxy.url + "/v1/responses", json={"model": "gpt-4o", "input": "hi"})
    assert response.status_code == 429
    assert response.content == upstream.error_body
    assert response.headers["x-context-policy"]
    assert usage_rows(proxy)[-1]["error"] == "upstream_429"


def test_a_call_without_its_output_is_the_upstreams_400(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    """Within budget the body goes as it came: the fake (like OpenAI) refuses the orphan."""
    items = agent_loop(1)[:-1]
    response = httpx.post(proxy.url + "/v1/responses", json={"model": "gpt-4o", "input": items})
    assert response.status_code == 400
    assert "No tool output found" in response.json()["error"]["message"]


def test_bad_bodies_are_openai_shaped_400s(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    for body, param in (
        ({"input": "hi"}, "model"),
        ({"model": "gpt-4o", "input": 3}, "input"),
        ({"model": "gpt-4o", "input": [1]}, "input[0]"),
        ({"model": "gpt-4o", "input": "hi", "max_output_tokens": -1}, "max_output_tokens"),
    ):
        response = httpx.post(proxy.url + "/v1/responses", json=body)
        assert response.status_code == 400, body
        assert response.json()["error"]["param"] == param
        assert response.json()["error"]["type"] == "invalid_request_error"
    assert upstream.requests == []
    assert {r["api"] for r in usage_rows(proxy, at_least=4)} == {"responses"}


def test_previous_response_id_is_forwarded_and_noted(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    body = {
        "model": "gpt-4o",
        "previous_response_id": "resp_1",
        "input": [{"type": "function_call_output", "call_id": "c", "output": "ok"}],
    }
    response = httpx.post(proxy.url + "/v1/responses", json=body)
    assert response.status_code == 200
    assert upstream.last.json() == body
    plan = httpx.post(proxy.url + "/v1/context/plan", json=body).json()
    assert plan["request"] == body
    assert any("previous_response_id" in p for p in plan["report"]["problems"])


def test_plan_endpoint_takes_a_responses_body(
    start_proxy: Any, policies_dir: Path, upstream: FakeUpstream
) -> None:
    (policies_dir / "default.yaml").write_text(SMALL_WINDOW)
    proxy = start_proxy()
    body = {"model": "gpt-4o", "instructions": "Be brief.", "input": agent_loop(40), "tools": TOOLS}
    response = httpx.post(proxy.url + "/v1/context/plan", json=body)
    assert response.status_code == 200
    plan = response.json()
    assert "messages" not in plan["request"] and plan["request"]["tools"][:-1] == TOOLS
    assert plan["request"]["tools"][-1]["name"] == "context_recall"  # trimmed: the recall tool
    assert plan["request"]["instructions"] == "Be brief."
    assert int(response.headers["x-context-trimmed"]) > 0
    assert plan["report"]["tokens_after"] <= plan["report"]["budget"]
    assert upstream.requests == []
    # the request it shows is the one the proxy forwards
    httpx.post(proxy.url + "/v1/responses", json=body)
    assert upstream.last.json() == plan["request"]


def test_stream_with_function_calls(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    """A streamed call, then the streamed answer to its output: the SDK's own loop."""
    sdk = client(proxy)
    items: list[Any] = [{"role": "user", "content": "Read src/a.py"}]
    with sdk.responses.stream(model="gpt-4o", input=items, tools=TOOLS) as stream:  # type: ignore[arg-type]
        kinds = [event.type for event in stream]
        first = stream.get_final_response()
    call = first.output[0]
    assert call.type == "function_call" and call.name == "read_file"
    assert "response.output_item.done" in kinds and kinds[-1] == "response.completed"
    items += [
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "print(1)"},
    ]
    with sdk.responses.stream(model="gpt-4o", input=items, tools=TOOLS) as stream:  # type: ignore[arg-type]
        for _ in stream:
            pass
        second = stream.get_final_response()
    assert "Tool said: print(1)" in second.output_text
    assert upstream.last.json()["input"][1]["call_id"] == call.call_id
    rows = usage_rows(proxy, at_least=2)
    assert [(r["api"], r["stream"], r["status"]) for r in rows] == [("responses", True, 200)] * 2
