"""Trimmed conversations a model can follow, end to end: a technical chat (short
questions, long answers) replayed turn by turn through the proxy with the official openai
and anthropic SDKs against the fake upstream. Every forwarded request fits and keeps whole
turns: no question without its answer, the previous turn always there, the newest turns
before older ones, a marker where turns were left out; a Messages body the API accepts.
And a request whose required parts are over the budget but within the window (Codex's
first request to a small model) is answered, flagged critical, instead of refused."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pytest

from proxy.anthropic import to_chat
from proxy.policy.model import Policy
from proxy.tokens import TokenCounter
from tests.coherence import coherence
from tests.fake_messages import problem
from tests.fake_upstream import FakeUpstream
from tests.server.test_proxy_e2e import usage_rows

WINDOW = 4096
BUDGET = round(0.8 * WINDOW) - 1  # floor(0.8 * 4096)
TURNS = 16
SYSTEM = "You are a senior engineer answering questions about infrastructure precisely."
TOPICS = ["connection pools", "liveness probes", "log rotation", "TLS resumption", "consumer lag",
          "query plans", "build caches", "GC pauses", "eviction", "rate limits", "snapshots",
          "autoscaling", "write-ahead logs", "DNS caching", "backpressure", "rebalancing"]  # fmt: skip


def technical_chat(seed: int) -> list[dict[str, str]]:
    """Short questions, answers of about 350 tokens, each naming a setting of its own."""
    rng = random.Random(seed)
    chat: list[dict[str, str]] = []
    for n, topic in enumerate(TOPICS[:TURNS]):
        chat.append({"role": "user", "content": f"How should I tune {topic}? (question {n})"})
        steps = " ".join(
            f"Step {k}: measure the {topic} for a day, change one value, compare with "
            f"{rng.randrange(10, 99)} percent of the peak and keep notes of why."
            for k in range(10)
        )
        setting = f"Set {topic.replace(' ', '_')}_limit to {rng.randrange(100, 9999)}."
        chat.append({"role": "assistant", "content": f"For {topic}: {steps} {setting}"})
    return chat


def check_turns(original: list[dict[str, Any]], forwarded: list[dict[str, Any]]) -> None:
    tokens = TokenCounter().for_model("gpt-4o-mini", Policy())
    setup = next(i for i, m in enumerate(original) if m["role"] == "assistant")
    seen = coherence(original, forwarded, setup, BUDGET, tokens.count_message)
    assert seen.split == 0, "a turn split"
    assert seen.previous, "the previous turn left out"
    assert not seen.inverted, "an older turn kept whole before one of the newest"
    assert not seen.newest_omitted, "a newest reply a placeholder while an older turn is whole"


def test_a_long_chat_through_the_openai_sdk_keeps_whole_turns(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    (policies_dir / "default.yaml").write_text(
        f"models:\n  gpt-4o-mini: {{context_window: {WINDOW}}}\n"
    )
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0)
    chat = technical_chat(1)
    sent: list[list[dict[str, Any]]] = []
    for n in range(0, len(chat), 2):
        history = [{"role": "system", "content": SYSTEM}, *chat[:n], chat[n]]
        reply = sdk.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=history)
        assert int(reply.headers["x-context-tokens-after"]) <= BUDGET
        sent.append(history)
    forwarded = [r.json()["messages"] for r in upstream.chat_requests]
    assert len(forwarded) == len(sent)
    trimmed = 0
    for history, out in zip(sent, forwarded, strict=True):
        if out == history:
            continue
        trimmed += 1
        check_turns(history, out)
    assert trimmed >= 6
    rows = usage_rows(proxy, at_least=len(sent))
    assert all(r["tokens_after"] <= BUDGET and r["status"] == 200 for r in rows)


def test_a_long_chat_through_the_anthropic_sdk_keeps_whole_turns_in_a_valid_body(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, fake_upstream_server: Any
) -> None:
    _, base = fake_upstream_server
    model = "claude-sonnet-4-6"
    (policies_dir / "default.yaml").write_text(
        f"upstream: {{anthropic: {{base_url: '{base}'}}}}\n"
        f"models:\n  {model}: {{context_window: {WINDOW}}}\n"
    )
    proxy = start_proxy()
    sdk = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-client", max_retries=0)
    chat = technical_chat(2)
    for n in range(0, len(chat), 2):
        messages = [*chat[:n], chat[n]]
        sdk.messages.create(model=model, max_tokens=256, system=SYSTEM, messages=messages)  # type: ignore[arg-type]
    assert len(upstream.messages_requests) == len(chat) // 2
    trimmed = 0
    for rec in upstream.messages_requests:
        body = rec.json()
        assert problem(body) is None
        original = to_chat(
            {"system": SYSTEM, "messages": chat[: chat.index(_last_question(body)) + 1]}
        ).messages
        original, forwarded = (
            [_plain(m) for m in original],
            [_plain(m) for m in to_chat(body).messages],
        )
        if forwarded == original:
            continue
        trimmed += 1
        check_turns(original, forwarded)
    assert trimmed >= 4


def test_a_tagged_chat_through_the_openai_sdk_keeps_whole_turns(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    """Tags set priority, never turn structure: every user message tagged (an id, a
    cluster), a summary of the early turns as a tagged system message, asked about the
    first answer; each forwarded request still keeps whole turns, the newest with their
    text, and no tag reaches the upstream."""
    (policies_dir / "default.yaml").write_text(
        f"models:\n  gpt-4o-mini: {{context_window: {WINDOW}}}\n"
    )
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0)
    chat: list[dict[str, Any]] = []
    for n, m in enumerate(technical_chat(3)):
        cluster = "early" if n < 8 else "late"
        tag = {"id": f"m{n}", "cluster": cluster} if m["role"] == "user" else None
        chat.append({**m, "x_context": tag} if tag else m)
    summary = {"role": "system", "content": "Summary: the first four answers tuned pools, "
               "probes, rotation and TLS.", "x_context": {"summary_of": "early"}}  # fmt: skip
    chat.insert(8, summary)
    question = {"role": "user", "content": "What did you suggest for connection pools?"}
    history = [{"role": "system", "content": SYSTEM}, *chat, question]
    sdk.chat.completions.create(model="gpt-4o-mini", messages=history)  # type: ignore[arg-type]
    out = upstream.chat_requests[-1].json()["messages"]
    assert all("x_context" not in m for m in out)
    plain = [{k: v for k, v in m.items() if k != "x_context"} for m in history]
    assert out != plain
    check_turns(plain, out)


def _last_question(body: dict[str, Any]) -> dict[str, str]:
    content = body["messages"][-1]["content"]
    text = content if isinstance(content, str) else content[-1]["text"]
    return {"role": "user", "content": text}


def _plain(m: dict[str, Any]) -> dict[str, Any]:
    """A read message without the read step's bookkeeping (compared by content)."""
    return {"role": m["role"], "content": m["content"]}


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_required_parts_over_the_budget_within_the_window_are_answered(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, api: str
) -> None:
    """As Codex's first request to a small model: long instructions and tools, over the
    80% budget, within the window: forwarded whole, flagged critical, answered."""
    (policies_dir / "default.yaml").write_text("models:\n  gpt-4o: {context_window: 8192}\n")
    proxy = start_proxy()
    instructions = "Follow the repository's rules. " + "rule " * 4700
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{k}",
                "description": "does " * 260,
                "parameters": {"type": "object"},
            },
        }
        for k in range(8)
    ]
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0)
    if api == "chat":
        raw = sdk.chat.completions.with_raw_response.create(
            model="gpt-4o", tools=tools,  # type: ignore[arg-type]
            messages=[{"role": "system", "content": instructions},
                      {"role": "user", "content": "Read the notes and summarize them."}],
        )  # fmt: skip
        sent = upstream.chat_requests[-1].json()
        assert sent["messages"][0]["content"] == instructions
    else:
        flat = [{"type": "function", **t["function"]} for t in tools]
        raw = sdk.responses.with_raw_response.create(
            model="gpt-4o", instructions=instructions, tools=flat,  # type: ignore[arg-type]
            input="Read the notes and summarize them.",
        )  # fmt: skip
        sent = upstream.responses_requests[-1].json()
        assert sent["instructions"] == instructions
    assert raw.http_response.status_code == 200
    before, budget = (
        int(raw.headers["x-context-tokens-before"]),
        int(raw.headers["x-context-budget"]),
    )
    assert budget == 6553 < before <= 8192 - 16
    assert raw.headers["x-context-level"] == "critical"
    row = usage_rows(proxy)[-1]
    assert row["status"] == 200 and row["level"] == "critical" and row["tokens_after"] == before
    assert orjson.dumps(sent)  # forwarded as it came
