"""Real tool loops through the proxy: the official openai SDK runs a chat agent with
parallel tool calls against a fake model that keeps calling tools (fake_agent_model.py),
plain and streamed, its history growing past the budget several times; every forwarded
request fits, keeps its setup and pairs every call with its result. A request whose
required parts alone cannot fit is refused as the SDK shows a context-length error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import agents  # the test extra installs it: never skipped
import openai
import pytest

from tests.conftest import RunningProxy
from tests.fake_upstream import FakeUpstream

BUDGET = 4000
POLICY = "budget: {reserve_output: false}\nmodels:\n  gpt-4o: {context_window: 5000}\n"
TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file of the repository.",
    "parameters": {"type": "object", "properties": {"step": {"type": "integer"},
                                                    "part": {"type": "string"}}}}}]  # fmt: skip
SETUP = [
    {"role": "system", "content": "You are a coding agent. Use read_file, then answer."},
    {"role": "user", "content": "Find where invoices are rounded and explain it."},
]


def run_tool(arguments: str) -> str:
    """The client's tool: a long file read, naming its step (the fake model counts on it)."""
    import json

    args = json.loads(arguments)
    body = " ".join(f"line{args['step']}{args['part']}{k}" for k in range(380))
    return f"step {args['step']} part {args['part']}: {body}"


def loop(proxy: RunningProxy, stream: bool) -> tuple[list[dict[str, Any]], list[int], str]:
    """The agent's loop as the SDK runs it; the messages it ended with, the proxy's
    tokens-after per step, and the final answer."""
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-agent", max_retries=0)
    messages: list[dict[str, Any]] = [dict(m) for m in SETUP]
    after: list[int] = []
    for _ in range(40):
        if stream:
            raw = client.chat.completions.with_raw_response.create(
                model="gpt-4o",
                messages=messages,
                tools=TOOLS,
                stream=True,  # type: ignore[arg-type]
            )
            after.append(int(raw.headers["x-context-tokens-after"]))
            calls: dict[int, dict[str, Any]] = {}
            text = ""
            for chunk in raw.parse():
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                text += delta.content or ""
                for call in delta.tool_calls or []:
                    entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                    entry["id"] += call.id or ""
                    entry["name"] += (call.function.name or "") if call.function else ""
                    entry["arguments"] += (call.function.arguments or "") if call.function else ""
            made = [{"id": c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for _, c in sorted(calls.items())]  # fmt: skip
        else:
            raw = client.chat.completions.with_raw_response.create(
                model="gpt-4o",
                messages=messages,
                tools=TOOLS,  # type: ignore[arg-type]
            )
            after.append(int(raw.headers["x-context-tokens-after"]))
            message = raw.parse().choices[0].message
            text = message.content or ""
            made = [c.model_dump() for c in message.tool_calls or []]
        if not made:
            return messages, after, text
        messages.append({"role": "assistant", "content": None, "tool_calls": made})
        for call in made:
            result = run_tool(call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    raise AssertionError("the loop never ended")


def paired(messages: list[dict[str, Any]]) -> bool:
    """Every call has its results right after it, and every result its call."""
    pending: set[str] = set()
    for m in messages:
        if m.get("role") == "tool":
            if m["tool_call_id"] not in pending:
                return False
            pending.discard(m["tool_call_id"])
            continue
        if pending:
            return False
        pending = {c["id"] for c in m.get("tool_calls") or []}
    return not pending


@pytest.mark.parametrize("stream", [False, True])
def test_an_sdk_tool_loop_is_trimmed_inside_the_loop(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, stream: bool
) -> None:
    (policies_dir / "default.yaml").write_text(POLICY)
    proxy = start_proxy()
    upstream.mode, upstream.agent_steps = "agent", 12
    messages, after, answer = loop(proxy, stream)
    assert answer == "Done after 12 steps."
    assert len(messages) == 2 + 12 * 3  # the client kept everything; the proxy trimmed
    assert all(a <= BUDGET for a in after)
    forwarded = [
        r.json()["messages"] for r in upstream.requests if r.path.endswith("/chat/completions")
    ]
    assert len(forwarded) == 13
    trimmed = [f for f, sent in zip(forwarded, range(13), strict=True) if len(f) < 2 + 3 * sent]
    assert len(trimmed) >= 4  # over the budget step after step
    for f in forwarded:
        assert f[:2] == SETUP  # the setup, as it came
        assert paired(f)


def test_an_sdk_request_whose_required_parts_overflow_is_refused_as_too_long(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    (policies_dir / "default.yaml").write_text(POLICY)
    proxy = start_proxy()
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-agent", max_retries=0)
    huge = [*SETUP[:1], {"role": "user", "content": "word " * 6000}]
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="gpt-4o", messages=huge, tools=TOOLS)  # type: ignore[arg-type]
    assert refused.value.code == "context_length_exceeded"
    assert not upstream.requests


@pytest.mark.parametrize("api", ["responses", "chat"])
@pytest.mark.parametrize("streamed", [False, True])
def test_the_agents_sdk_runs_a_long_tool_loop_through_the_proxy(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, api: str, streamed: bool
) -> None:
    """`Runner.run` and `run_streamed` with a function tool, over the Responses API and
    over chat completions: twelve steps of long file reads, trimmed inside the loop."""
    import asyncio

    from openai import AsyncOpenAI

    (policies_dir / "default.yaml").write_text(POLICY)
    proxy = start_proxy()
    upstream.mode, upstream.agent_steps = "agent", 12
    agents.set_tracing_disabled(True)

    @agents.function_tool
    def read_file(step: int, part: str) -> str:
        """Read a file of the repository."""
        return run_tool(f'{{"step": {step}, "part": "{part}"}}')

    async def run() -> str:
        client = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-agent", max_retries=0)
        model: Any = (
            agents.OpenAIResponsesModel(model="gpt-4o", openai_client=client)
            if api == "responses"
            else agents.OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client)
        )
        agent = agents.Agent(
            name="coder", instructions=SETUP[0]["content"], tools=[read_file], model=model
        )
        try:
            if streamed:
                result = agents.Runner.run_streamed(agent, SETUP[1]["content"], max_turns=40)
                async for _ in result.stream_events():
                    pass
            else:
                result = await agents.Runner.run(agent, SETUP[1]["content"], max_turns=40)
            return str(result.final_output)
        finally:
            await client.close()

    assert asyncio.run(run()) == "Done after 12 steps."
    from tests.server.test_proxy_e2e import usage_rows

    rows = usage_rows(proxy, at_least=13)
    assert len(rows) >= 13 and all(r["status"] == 200 for r in rows)
    assert all(r["tokens_after"] <= BUDGET for r in rows)
    assert sum(r["tokens_before"] > BUDGET for r in rows) >= 4  # trimmed, step after step
    if api == "responses":
        for r in upstream.responses_requests:
            sent = r.json()
            assert sent["instructions"] == SETUP[0]["content"]
            assert sent["input"][0]["content"] == SETUP[1]["content"]  # the task, kept
    else:
        for f in (
            r.json()["messages"] for r in upstream.requests if r.path.endswith("/completions")
        ):
            assert f[0]["content"] == SETUP[0]["content"] and f[1]["content"] == SETUP[1]["content"]
            assert paired(f)


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_the_agents_sdk_gets_a_context_length_error_when_the_task_cannot_fit(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, api: str
) -> None:
    import asyncio

    from openai import AsyncOpenAI

    (policies_dir / "default.yaml").write_text(POLICY)
    proxy = start_proxy()
    upstream.mode = "agent"
    agents.set_tracing_disabled(True)

    async def run() -> None:
        client = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-agent", max_retries=0)
        model: Any = (
            agents.OpenAIResponsesModel(model="gpt-4o", openai_client=client)
            if api == "responses"
            else agents.OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client)
        )
        agent = agents.Agent(name="coder", instructions=SETUP[0]["content"], model=model)
        try:
            await agents.Runner.run(agent, "word " * 6000)
        finally:
            await client.close()

    with pytest.raises(openai.BadRequestError) as refused:
        asyncio.run(run())
    assert refused.value.code == "context_length_exceeded"
    assert not upstream.requests
