"""langchain's tool-calling agent (`create_agent` over `ChatOpenAI`) runs a long loop of
parallel tool calls through the proxy, invoked and streamed: the history goes over the
budget step after step, every forwarded request fits, keeps the setup and pairs every call
with its result. A request whose required parts alone cannot fit is refused, and the
agent raises the context-length error the upstream would have given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from tests.conftest import RunningProxy
from tests.fake_upstream import FakeUpstream
from tests.server.test_agent_loops_e2e import BUDGET, POLICY, SETUP, paired, run_tool
from tests.server.test_proxy_e2e import usage_rows

STEPS = 10


@tool
def read_file(step: int, part: str) -> str:
    """Read a file of the repository."""
    return run_tool(f'{{"step": {step}, "part": "{part}"}}')


def agent(proxy: RunningProxy, streaming: bool) -> Any:
    model = ChatOpenAI(
        model="gpt-4o", base_url=proxy.url + "/v1", api_key="sk-langchain",  # type: ignore[arg-type]
        max_retries=0, streaming=streaming,
    )  # fmt: skip
    return create_agent(model, tools=[read_file], system_prompt=SETUP[0]["content"])


@pytest.mark.parametrize("streaming", [False, True])
def test_a_langchain_agent_is_trimmed_inside_its_loop(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, streaming: bool
) -> None:
    (policies_dir / "default.yaml").write_text(POLICY)
    proxy = start_proxy()
    upstream.mode, upstream.agent_steps = "agent", STEPS
    request = {"messages": [{"role": "user", "content": SETUP[1]["content"]}]}
    if streaming:
        states = list(
            agent(proxy, True).stream(request, {"recursion_limit": 100}, stream_mode="values")
        )
        final = states[-1]
    else:
        final = agent(proxy, False).invoke(request, {"recursion_limit": 100})
    assert final["messages"][-1].content == f"Done after {STEPS} steps."
    assert len(final["messages"]) == 1 + STEPS * 3 + 1  # the agent kept all; the proxy trimmed

    forwarded = [r.json() for r in upstream.chat_requests]
    assert len(forwarded) == STEPS + 1
    for body in forwarded:
        assert body["messages"][:2] == SETUP
        assert paired(body["messages"])
        assert body.get("stream", False) is streaming
    rows = usage_rows(proxy, at_least=STEPS + 1)
    assert all(r["status"] == 200 and r["tokens_after"] <= BUDGET for r in rows), [
        (r["status"], r["error"], r["tokens_after"], r["stream"])
        for r in rows
        if r["status"] != 200 or r["tokens_after"] > BUDGET
    ]
    assert sum(r["tokens_before"] > BUDGET for r in rows) >= 4


def test_a_langchain_agent_gets_a_context_length_error_when_the_task_cannot_fit(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    (policies_dir / "default.yaml").write_text(POLICY)
    proxy = start_proxy()
    upstream.mode = "agent"
    request = {"messages": [{"role": "user", "content": "word " * 6000}]}
    with pytest.raises(openai.BadRequestError) as refused:
        agent(proxy, False).invoke(request)
    assert refused.value.code == "context_length_exceeded"
    assert not upstream.chat_requests
