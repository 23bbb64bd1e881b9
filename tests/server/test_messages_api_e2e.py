"""Anthropic's Messages API through the proxy, driven by the official anthropic SDK against
a fake upstream that plays Claude (tests/fake_messages.py: the API's own checks on roles
and tool_use/tool_result pairs, a tool loop, typed events). Proxy keys come as
`x-api-key`; the team's Anthropic key goes upstream as `x-api-key`, with the client's
`anthropic-version` and `anthropic-beta` headers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from proxy.anthropic import to_chat
from proxy.policy.model import Policy, hash_key
from proxy.tokens import TokenCounter
from tests.conftest import RunningProxy
from tests.fake_upstream import FakeUpstream
from tests.server.test_proxy_e2e import usage_rows

KEY, TEAM_KEY = "cp-claude-team", "sk-ant-team-secret"
MODEL = "claude-sonnet-4-6"
WINDOW, BUDGET, STEPS = 5000, 4000, 12
SYSTEM = "You are a coding agent. Read files with read_file, then answer."
TASK = "Find where invoices are rounded and explain it."
TOOL = {"name": "read_file", "description": "Read a file of the repository.",
        "input_schema": {"type": "object", "properties": {"step": {"type": "integer"}}}}  # fmt: skip


@pytest.fixture
def claude_proxy(
    start_proxy: Any, policies_dir: Path, fake_upstream_server: Any, monkeypatch: Any
) -> RunningProxy:
    _, base = fake_upstream_server
    monkeypatch.setenv("TEAM_ANTHROPIC_KEY", TEAM_KEY)
    (policies_dir / "default.yaml").write_text(
        f'team: claude\nkeys: ["{hash_key(KEY)}"]\nmetrics: public\n'
        f"upstream: {{anthropic: {{base_url: '{base}', api_key_env: TEAM_ANTHROPIC_KEY}}}}\n"
        f"budget: {{reserve_output: false}}\nmodels:\n  {MODEL}: {{context_window: {WINDOW}}}\n"
    )
    return start_proxy()  # type: ignore[no-any-return]


def client(proxy: RunningProxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0, timeout=20)


def read_file(step: int) -> str:
    return f"step {step}: " + " ".join(f"line{step}x{k}" for k in range(300))


def run_loop(proxy: RunningProxy, stream: bool) -> tuple[list[dict[str, Any]], str]:
    """The agent loop as a client runs it: call, run the tool, send the result back."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    sdk = client(proxy)
    for _ in range(40):
        options: dict[str, Any] = {"model": MODEL, "max_tokens": 512, "system": SYSTEM,
                                   "tools": [TOOL], "messages": messages,
                                   "extra_headers": {"anthropic-beta": "fake-beta-1"}}  # fmt: skip
        if stream:
            with sdk.messages.stream(**options) as events:
                reply = events.get_final_message()
        else:
            reply = sdk.messages.create(**options)
        content = [block.model_dump(exclude_none=True) for block in reply.content]
        uses = [b for b in content if b["type"] == "tool_use"]
        if not uses:
            return messages, content[0]["text"]
        messages.append({"role": "assistant", "content": content})
        results = [{"type": "tool_result", "tool_use_id": u["id"],
                    "content": read_file(u["input"]["step"])} for u in uses]  # fmt: skip
        messages.append({"role": "user", "content": results})
    raise AssertionError("the loop never ended")


@pytest.mark.parametrize("stream", [False, True])
def test_an_anthropic_sdk_tool_loop_is_trimmed_inside_the_loop(
    claude_proxy: RunningProxy, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.mode, upstream.agent_steps = "agent", STEPS
    messages, answer = run_loop(claude_proxy, stream)
    assert answer == f"Done after {STEPS} steps."
    assert len(messages) == 1 + 2 * STEPS
    sent = upstream.messages_requests
    assert len(sent) == STEPS + 1
    for rec in sent:
        body = rec.json()
        assert body["system"] == SYSTEM and body["messages"][0]["content"] == TASK  # the setup
        assert rec.headers["x-api-key"] == TEAM_KEY and "authorization" not in rec.headers
        assert rec.headers["anthropic-beta"] == "fake-beta-1"
        assert rec.headers["anthropic-version"]
        for message in body["messages"]:  # a thinking block stays before its tool_use
            kinds = (
                [b["type"] for b in message["content"]]
                if isinstance(message["content"], list)
                else []
            )
            if "tool_use" in kinds:
                assert kinds[0] == "thinking"
    rows = usage_rows(claude_proxy, at_least=STEPS + 1)
    assert len(rows) == STEPS + 1
    assert all(
        r["api"] == "messages" and r["status"] == 200 and r["team"] == "claude" for r in rows
    )
    assert all(r["tokens_after"] <= BUDGET for r in rows)
    assert sum(r["tokens_before"] > BUDGET for r in rows) >= 4
    for rec, row in zip(sent, rows, strict=True):  # the upstream's own usage, cache included
        size = len(orjson.dumps(rec.json()))
        assert row["usage_source"] == "upstream"
        assert row["prompt_tokens"] == 2 * (size // 8) + 5 and row["cached_tokens"] == size // 8
        assert row["completion_tokens"] == 9


def test_a_request_within_budget_goes_as_it_came_with_the_context_headers(
    claude_proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    body = {"model": MODEL, "max_tokens": 64, "system": [{"type": "text", "text": SYSTEM,
            "cache_control": {"type": "ephemeral"}}], "messages": [{"role": "user", "content": "Hi"}]}  # fmt: skip
    raw = orjson.dumps(body)
    answer = httpx.post(claude_proxy.url + "/v1/messages", content=raw,
                        headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"})  # fmt: skip
    assert answer.status_code == 200 and answer.json()["type"] == "message"
    assert upstream.messages_requests[-1].body == raw
    assert answer.headers["x-context-tokens-after"] == answer.headers["x-context-tokens-before"]
    assert answer.headers["x-context-trimmed"] == "0"


def test_a_task_too_long_is_refused_as_anthropic_says_prompt_is_too_long(
    claude_proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        client(claude_proxy).messages.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "word " * 6000}]
        )
    error = refused.value.body["error"]  # type: ignore[index]
    assert refused.value.body["type"] == "error"  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("prompt is too long: ")
    assert not upstream.messages_requests
    assert usage_rows(claude_proxy)[-1]["api"] == "messages"


def test_a_wrong_key_gets_an_anthropic_shaped_401(claude_proxy: RunningProxy) -> None:
    bad = anthropic.Anthropic(base_url=claude_proxy.url, api_key="nope", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as refused:
        bad.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "x"}])
    assert refused.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


def test_count_tokens_is_answered_from_the_proxys_own_count(
    claude_proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    body: dict[str, Any] = {"model": MODEL, "system": SYSTEM, "tools": [TOOL],
                            "messages": [{"role": "user", "content": TASK}]}  # fmt: skip
    counted = client(claude_proxy).messages.count_tokens(**body)
    own = TokenCounter().chat_tokenizer(MODEL, Policy()).count_request(to_chat(body).body)
    assert counted.input_tokens == own > 0
    assert not upstream.requests


def test_a_big_count_is_made_in_slices_and_is_the_same_count(
    claude_proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    """A body over a megabyte is counted a slice of messages at a time (each in the heavy
    slot on its own, so that other teams' requests wait for one slice, not the whole):
    the same count as in one piece."""
    messages: list[dict[str, Any]] = [
        {"role": "user" if n % 2 == 0 else "assistant",
         "content": [{"type": "text", "text": f"step {n}: " + "word " * 700}]}
        for n in range(400)
    ]  # fmt: skip
    body: dict[str, Any] = {"model": MODEL, "system": SYSTEM, "tools": [TOOL], "messages": messages}
    assert len(orjson.dumps(body)) > 1024 * 1024
    counted = client(claude_proxy).messages.count_tokens(**body)
    own = TokenCounter().chat_tokenizer(MODEL, Policy()).count_request(to_chat(body).body)
    assert counted.input_tokens == own > 0


def test_a_broken_stream_ends_with_an_anthropic_error_event(
    claude_proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    upstream.mode = "break"
    with (
        pytest.raises(anthropic.APIStatusError),
        client(claude_proxy).messages.stream(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Hi"}]
        ) as events,
    ):
        events.get_final_message()
    rows = usage_rows(claude_proxy)
    assert rows[-1]["status"] == 502 and rows[-1]["error"] == "upstream_stream_broken"


def test_the_plan_route_answers_a_messages_body_with_what_would_be_forwarded(
    claude_proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    upstream.mode = "ok"
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for n in range(10):
        messages += [
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{n}", "name": "read_file", "input": {"step": n}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": read_file(n)}]},
        ]  # fmt: skip
    body = {
        "model": MODEL,
        "max_tokens": 64,
        "system": SYSTEM,
        "tools": [TOOL],
        "messages": messages,
    }
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    planned = httpx.post(claude_proxy.url + "/v1/context/plan", json=body, headers=headers)
    assert planned.status_code == 200
    answer = planned.json()
    assert answer["report"]["tokens_after"] <= BUDGET < answer["report"]["tokens_before"]
    sent = httpx.post(claude_proxy.url + "/v1/messages", json=body, headers=headers)
    assert sent.status_code == 200
    assert upstream.messages_requests[-1].json() == answer["request"]


def test_reported_counts_calibrate_the_estimate_shown_in_metrics(
    claude_proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    """The fake reports about a token per 4 bytes of body: for `word word ...` more than the
    estimate's 1.25 per cl100k token, so the factor rises to what was reported, plus 2%."""
    sdk = client(claude_proxy)
    sdk.messages.create(
        model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "word " * 3000}]
    )
    row = usage_rows(claude_proxy)[-1]
    raw = row["tokens_after"] / 1.25
    metrics = httpx.get(claude_proxy.url + "/metrics").text
    shown = [line for line in metrics.splitlines()
             if line.startswith(f'context_proxy_token_estimate_factor{{model="{MODEL}"}}')]  # fmt: skip
    assert shown, metrics[-2000:]
    factor = float(shown[0].split()[-1])
    assert factor >= row["prompt_tokens"] / raw * 1.02 - 0.01 and factor > 1.25
    after = sdk.messages.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": "word " * 3000}]
    )
    assert after.input_tokens >= row["prompt_tokens"]  # now counted at least as reported
