"""The OpenAI Agents SDK runs a tool-calling agent through the proxy against the fake."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.conftest import RunningProxy
from tests.fake_upstream import FakeUpstream
from tests.server.test_proxy_e2e import usage_rows

agents = pytest.importorskip("agents")


def test_tool_calling_agent_completes(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)
    called: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        called.append(city)
        return f"Sunny in {city}"

    async def run() -> Any:
        client = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-agent", max_retries=0)
        model = agents.OpenAIResponsesModel(model="gpt-4o", openai_client=client)
        agent = agents.Agent(
            name="weather", instructions="Answer with the tool.", tools=[get_weather], model=model
        )
        try:
            return await agents.Runner.run(agent, "What is the weather in Paris?")
        finally:
            await client.close()

    result = asyncio.run(run())
    assert called == ["Paris"]
    assert "Sunny in Paris" in result.final_output
    turns = upstream.responses_requests
    assert len(turns) == 2
    second = turns[1].json()
    assert second["instructions"] == "Answer with the tool."
    kinds = [i.get("type", "message") for i in second["input"]]
    assert kinds[-2:] == ["function_call", "function_call_output"]
    rows = usage_rows(proxy, at_least=2)
    assert [r["api"] for r in rows] == ["responses", "responses"]
    assert all(r["status"] == 200 and r["usage_source"] == "upstream" for r in rows)


def test_streamed_agent_completes(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"Rain in {city}"

    async def run() -> Any:
        client = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-agent", max_retries=0)
        model = agents.OpenAIResponsesModel(model="gpt-4o", openai_client=client)
        agent = agents.Agent(name="weather", tools=[get_weather], model=model)
        try:
            streamed = agents.Runner.run_streamed(agent, "Weather in Rome?")
            async for _ in streamed.stream_events():
                pass
            return streamed
        finally:
            await client.close()

    result = asyncio.run(run())
    assert "Rain in Paris" in result.final_output  # the fake calls the tool for Paris
    rows = usage_rows(proxy, at_least=2)
    assert [r["stream"] for r in rows] == [True, True]
    assert all(r["api"] == "responses" and r["status"] == 200 for r in rows)
