"""Every rewritten Messages body keeps the API's rules (hypothesis), with extended thinking,
parallel tool calls and the developer's prompts between tool loops.

Random sessions shaped like Claude Code's: a prompt, then steps whose assistant message
starts with its signed thinking and may hold text and several `tool_use` blocks, each
answered in the next user message (results first, sometimes with the developer's text
after them), and plain answers between prompts; planned at random budgets through the
read and write steps. Checked on what would be sent: the fake upstream's copy of the API's
checks (first message a user one, roles alternating, every `tool_use` answered by the next
message, every `tool_result` answering the message before, at most four cache points), and
thinking first in every assistant message that began with it, whatever was dropped.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.anthropic import to_chat, to_messages
from proxy.errors import ContextLengthExceeded
from proxy.planner import plan_request
from proxy.policy.model import CachePolicy, ModelPolicy, Policy
from proxy.tokens import TokenCounter
from tests.fake_messages import problem

MODEL = "claude-sonnet-4-6"
EPHEMERAL = {"type": "ephemeral"}
TOKENS = TokenCounter().chat_tokenizer(MODEL, Policy())
WORDS = ["read", "the", "file", "src/app.py", "fix", "test", "parse_header", "ok", "then"]

words = st.integers(1, 400).map(lambda n: " ".join(WORDS[(i * 5) % 9] for i in range(n)))


@st.composite
def sessions(draw: st.DrawFn) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix it. " + draw(words)}]
    uses = 0
    cached = 0
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["step", "step", "step", "answer"]))
        thinking = {"type": "thinking", "thinking": draw(words), "signature": f"sig{uses}"}
        blocks: list[dict[str, Any]] = [thinking]
        if kind == "answer" or draw(st.booleans()):
            blocks.append({"type": "text", "text": draw(words)})
        if kind == "answer":
            messages.append({"role": "assistant", "content": blocks})
            messages.append({"role": "user", "content": [{"type": "text", "text": draw(words)}]})
            continue
        ids = []
        for _ in range(draw(st.integers(1, 3))):  # parallel calls
            ids.append(f"toolu_{uses}")
            blocks.append({"type": "tool_use", "id": f"toolu_{uses}", "name": "Bash",
                           "input": {"command": draw(words)[:60]}})  # fmt: skip
            uses += 1
            if draw(st.integers(0, 5)) == 0:
                blocks.append({"type": "text", "text": draw(words)})  # text between calls
        results: list[dict[str, Any]] = [
            {"type": "tool_result", "tool_use_id": i, "content": draw(words)} for i in ids
        ]
        if cached < 3 and draw(st.integers(0, 4)) == 0:
            results[-1]["cache_control"] = {"type": "ephemeral"}
            cached += 1
        if draw(st.integers(0, 3)) == 0:  # the developer says something with the results
            results.append({"type": "text", "text": draw(words)})
        messages.append({"role": "assistant", "content": blocks})
        messages.append({"role": "user", "content": results})
    return {
        "model": MODEL,
        "max_tokens": 512,
        "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": EPHEMERAL}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": messages,
    }


def thinking_first(body: dict[str, Any], out: dict[str, Any]) -> str | None:
    """An assistant message sent that holds blocks of one that began with its thinking,
    but does not begin with it."""
    began = {
        orjson.dumps(b): m["content"][0]["type"] == "thinking"
        for m in body["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
    }
    for n, m in enumerate(out["messages"]):
        if m["role"] != "assistant" or not isinstance(m["content"], list):
            continue
        first = m["content"][0]["type"]
        if any(began.get(orjson.dumps(b)) for b in m["content"]) and first not in (
            "thinking",
            "redacted_thinking",
        ):
            return f"messages.{n} starts with {first}"
    return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions(), st.integers(600, 12000), st.booleans())
def test_every_rewritten_messages_body_keeps_the_apis_rules(
    body: dict[str, Any], window: int, cache: bool
) -> None:
    policy = Policy(
        models={MODEL: ModelPolicy(context_window=window)}, cache=CachePolicy(enabled=cache)
    )
    conv = to_chat(body)
    try:
        outcome = plan_request(conv.body, policy, TOKENS, window)
    except ContextLengthExceeded:
        return
    out = to_messages(body, conv, outcome.body["messages"])
    assert problem(out) is None, orjson.dumps(out["messages"])[:3000]
    assert thinking_first(body, out) is None
    for m in out["messages"]:
        assert m["content"], "no message is empty"
    assert outcome.tokens_after <= outcome.budget or outcome.problems
