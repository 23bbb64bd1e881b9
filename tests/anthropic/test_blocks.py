"""Anthropic's Messages bodies read into neutral chat messages and written back: as they
came when nothing changed, one exchange per tool_use and its tool_result, cleared results
keeping their ids, thinking with its tool_use, cache points only on kept blocks, and the
API's rules (first message a user one, every tool_result answering the message before)
holding after any plan, at any budget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.anthropic import to_chat, to_messages
from proxy.errors import ContextLengthExceeded
from proxy.planner import plan_request
from proxy.policy.model import ModelPolicy, Policy
from proxy.tokens import TokenCounter
from tests.fake_messages import problem

MODEL = "claude-sonnet-4-6"
TOKENS = TokenCounter().chat_tokenizer(MODEL, Policy())
CAPTURED = Path(__file__).parent / "data" / "claude_code_request.json"


def step(n: int, size: int, interleaved: bool = True) -> list[dict[str, Any]]:
    """One step of a tool loop: thinking + tool_use, then its result."""
    use = {
        "type": "tool_use",
        "id": f"toolu_{n}",
        "name": "Bash",
        "input": {"command": f"cat f{n}"},
    }
    thinking = {"type": "thinking", "thinking": f"Read file {n}.", "signature": f"s{n}"}
    result = {"type": "tool_result", "tool_use_id": f"toolu_{n}",
              "content": " ".join(f"w{n}x{k}" for k in range(size))}  # fmt: skip
    return [
        {"role": "assistant", "content": [thinking, use] if interleaved else [use]},
        {"role": "user", "content": [result]},
    ]


def conversation(steps: list[int], merged: bool = False) -> dict[str, Any]:
    """A setup, then the steps; `merged`: all steps' blocks in one assistant message and
    one user message, as Claude Code sends its loop."""
    system = [
        {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}
    ]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    pairs = [step(n, size) for n, size in enumerate(steps)]
    if merged and pairs:
        messages.append(
            {"role": "assistant", "content": [b for a, _ in pairs for b in a["content"]]}
        )
        messages.append({"role": "user", "content": [b for _, r in pairs for b in r["content"]]})
    else:
        messages += [m for pair in pairs for m in pair]
    ask = {"type": "text", "text": "Now run the tests."}
    if pairs:  # the newest results go with the next ask, in one user message
        messages[-1] = {**messages[-1], "content": [*messages[-1]["content"], ask]}
    else:
        messages.append({"role": "user", "content": [ask]})
    return {"model": MODEL, "max_tokens": 256, "system": system, "messages": messages,
            "thinking": {"type": "enabled", "budget_tokens": 1024}}  # fmt: skip


def planned(body: dict[str, Any], budget: int) -> dict[str, Any] | None:
    policy = Policy(models={MODEL: ModelPolicy(context_window=round(budget / 0.8))})
    conv = to_chat(body)
    try:
        outcome = plan_request(conv.body, policy, TOKENS, round(budget / 0.8))
    except ContextLengthExceeded:
        return None
    return to_messages(body, conv, outcome.body["messages"])


def test_a_body_planned_without_change_is_written_back_as_it_came() -> None:
    for body in (conversation([30, 40, 50]), conversation([30, 40], merged=True),
                 orjson.loads(CAPTURED.read_bytes())):  # fmt: skip
        conv = to_chat(body)
        assert to_messages(body, conv, conv.messages) == body


def test_each_tool_use_and_its_result_are_one_exchange_even_in_one_message() -> None:
    conv = to_chat(conversation([10, 10, 10], merged=True))
    roles = [m["role"] for m in conv.messages]
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "user",  # the ask after the newest result
    ]
    assert [m["tool_calls"][0]["id"] for m in conv.messages if m["role"] == "assistant"] == [
        "toolu_0", "toolu_1", "toolu_2"]  # fmt: skip


def test_a_cleared_result_keeps_its_id_and_the_thinking_stays_with_its_call() -> None:
    body = conversation([20, 20])
    conv = to_chat(body)
    edited = [dict(m) for m in conv.messages]
    tool = next(i for i, m in enumerate(edited) if m["role"] == "tool")
    edited[tool]["content"] = "[cleared]"
    out = to_messages(body, conv, edited)
    result = out["messages"][2]["content"][0]
    assert result == {"type": "tool_result", "tool_use_id": "toolu_0", "content": "[cleared]"}
    assert [b["type"] for b in out["messages"][1]["content"]] == ["thinking", "tool_use"]
    assert out["messages"][3:] == body["messages"][3:]  # the rest as it came


def test_dropping_steps_of_a_merged_loop_keeps_the_rest_paired() -> None:
    body = conversation([10, 10, 10], merged=True)
    conv = to_chat(body)
    keep = [m for m in conv.messages if "toolu_1" not in orjson.dumps(m).decode()]
    out = to_messages(body, conv, keep)
    assert problem(out) is None
    ids = [b.get("id") or b.get("tool_use_id") for m in out["messages"][1:] for b in m["content"]]
    assert ids == [None, "toolu_0", None, "toolu_2", "toolu_0", "toolu_2", None]  # the ask last


def test_a_made_message_becomes_user_text_merged_into_its_neighbour() -> None:
    body = conversation([10])
    conv = to_chat(body)
    note = {"role": "user", "content": "Earlier: the test failed on line 3."}
    out = to_messages(body, conv, [conv.messages[0], conv.messages[1], note, *conv.messages[2:]])
    first = out["messages"][0]["content"]
    assert first == [
        {"type": "text", "text": "Fix the failing test."},
        {"type": "text", "text": note["content"]},
    ]
    assert problem(out) is None


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(st.integers(min_value=5, max_value=900), min_size=1, max_size=14),
    merged=st.booleans(),
    budget=st.integers(min_value=300, max_value=6000),
)
def test_every_plan_keeps_the_apis_rules_and_the_setup(
    steps: list[int], merged: bool, budget: int
) -> None:
    body = conversation(steps, merged)
    out = planned(body, budget)
    if out is None:  # refused: the required parts alone do not fit
        return
    assert problem(out) is None, orjson.dumps(out["messages"])[:2000]
    assert out["system"] == body["system"]
    assert out["messages"][0]["content"] == "Fix the failing test." or out["messages"][0]["content"][0] == {
        "type": "text", "text": "Fix the failing test."}  # fmt: skip
    points = sum("cache_control" in b for m in out["messages"] if isinstance(m["content"], list)
                 for b in m["content"])  # fmt: skip
    assert points <= 4
    for message in out["messages"]:  # a thinking block is never parted from its tool_use
        kinds = (
            [b["type"] for b in message["content"]] if isinstance(message["content"], list) else []
        )
        for k, kind in enumerate(kinds):
            if kind == "tool_use":
                assert k > 0 and kinds[k - 1] == "thinking"
    assert TOKENS.count_request(to_chat(out).body) <= budget
    assert planned(body, budget) == out  # the same body, the same plan
    assert out["messages"][-1]["content"][-1] == body["messages"][-1]["content"][-1]  # the ask
    order = [
        orjson.dumps(b)
        for m in body["messages"]
        for b in m["content"]
        if isinstance(m["content"], list)
    ]
    kept = [
        orjson.dumps(b)
        for m in out["messages"]
        for b in m["content"]
        if isinstance(m["content"], list)
    ]
    kept_tool_blocks = [b for b in kept if b in order and b"tool_use" in b]
    assert kept_tool_blocks == [b for b in order if b in kept_tool_blocks]  # in their order


def test_the_captured_claude_code_request_is_counted_with_its_tools() -> None:
    captured = orjson.loads(CAPTURED.read_bytes())
    assert len(captured["tools"]) == 24 and isinstance(captured["system"], list)
    whole = TOKENS.count_request(to_chat(captured).body)
    bare = TOKENS.count_request(to_chat({**captured, "tools": []}).body)
    schemas = TOKENS.count_text(orjson.dumps(captured["tools"]).decode())
    assert 0.8 * schemas <= whole - bare <= 1.2 * schemas  # tools, about as their JSON


def test_context_proxy_plan_reads_and_writes_a_messages_body(tmp_path: Path, capsys: Any) -> None:
    from proxy.cli.main import main

    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "default.yaml").write_text(f"models:\n  {MODEL}: {{context_window: 2500}}\n")
    body = conversation([300] * 8, merged=True)
    (tmp_path / "request.json").write_bytes(orjson.dumps(body))
    assert main(["plan", str(tmp_path / "request.json"), "--policies", str(folder), "--json"]) == 0
    answer = orjson.loads(capsys.readouterr().out)
    request = answer["request"]
    assert request["system"] == body["system"] and problem(request) is None
    assert len(request["messages"][1]["content"]) < len(body["messages"][1]["content"])
    assert answer["report"]["tokens_after"] <= 2000 < answer["report"]["tokens_before"]
    assert main(["plan", str(tmp_path / "request.json"), "--policies", str(folder)]) == 0
    assert "Messages API body" in capsys.readouterr().out
