"""Cache-stable cuts through the whole stack: a chat app replays a long conversation turn
by turn with the official `openai` client, and the upstream sees a prefix that stays put
from one turn to the next, every request within budget, and a question about the cut-off
past answered from a recall message just before it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson

from proxy.planner.history.recall import RECALL_HEAD, RECALL_ROLE
from tests.conftest import RunningProxy
from tests.fake_messages import problem
from tests.fake_upstream import FakeUpstream
from tests.planner.cache.test_cache_cut import stable_part
from tests.server.test_proxy_e2e import usage_rows

WINDOW, BUDGET = 2500, 2000  # the default ratio 0.8, no output reserved
SUBJECTS = ["the violin lesson", "a trip to Porto", "the vegetable garden", "marathon training",
            "the pottery class", "a chess club", "sailing on the lake", "the new bakery"]  # fmt: skip


def conversation(turns: int, words: int = 14) -> list[dict[str, str]]:
    """User and assistant turns, each on a subject with words of its own."""
    out: list[dict[str, str]] = []
    for t in range(turns):
        subject = SUBJECTS[t % len(SUBJECTS)]
        own = " ".join(f"k{t}w{j}" for j in range(words))
        out.append({"role": "user", "content": f"Let me tell you about {subject}: {own}."})
        out.append({"role": "assistant", "content": f"Thanks for sharing {subject}, {own}!"})
    out[4] = {"role": "user", "content": "My quokka marmalade recipe needs three lemons."}
    return out


def send(proxy: RunningProxy, messages: list[dict[str, str]]) -> tuple[int, int]:
    """Sends the chat app's request; the proxy's counts of it and of what it forwarded."""
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0)
    system = {"role": "system", "content": "You are a kind assistant."}
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o",
        messages=[system, *messages],  # type: ignore[list-item]
    )
    raw.parse()
    return int(raw.headers["x-context-tokens-before"]), int(raw.headers["x-context-tokens-after"])


def test_a_replayed_chat_keeps_its_forwarded_prefix_and_recalls_the_cut_off_past(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    (policies_dir / "default.yaml").write_text(
        # the recall tool off: its declaration's room would move the steps measured here
        f"budget: {{reserve_output: false}}\ncache: {{chats: true}}\nrecall: {{tool: off}}\n"
        f"models:\n  gpt-4o: {{context_window: {WINDOW}}}\n"
    )
    proxy = start_proxy()
    turns = conversation(60)
    forwarded: list[list[Any]] = []
    for t in range(0, len(turns), 2):
        sent = turns[: t + 1]
        before, tokens_after = send(proxy, sent)
        assert tokens_after <= BUDGET
        body = upstream.requests[-1].json()
        assert body["messages"][-1] == sent[-1]  # the current turn, as sent
        forwarded.append(body["messages"])
    trimmed = [k for k, out in enumerate(forwarded) if out[1:] != turns[: 2 * k + 1]]
    assert len(trimmed) > 20  # the conversation outgrew the budget long ago
    # From one turn to the next the forwarded prompt starts with what the turn before
    # forwarded (the prompt cache's prefix), but where the boundary steps forward, or a
    # recall takes the room of turns since it.
    recalled = [
        any(str(m.get("content")).startswith(RECALL_HEAD) for m in out) for out in forwarded
    ]
    kept = [
        k
        for k in trimmed[1:]
        if forwarded[k][: len(stable_part(forwarded[k - 1]))] == stable_part(forwarded[k - 1])
        or recalled[k]
        or recalled[k - 1]
    ]
    steps = len(trimmed) - 1 - len(kept)
    step = BUDGET * 6 // 10  # (1 - watermark 0.4) of the budget
    assert 1 <= steps <= math.ceil((before - BUDGET) / step), (steps, before)
    # A question about a turn long cut off: recalled just before it.
    question = {"role": "user", "content": "What did my quokka marmalade recipe need?"}
    _, tokens_after = send(proxy, [*turns, question])
    assert tokens_after <= BUDGET
    out = upstream.requests[-1].json()["messages"]
    assert out[-1] == question
    assert out[-2]["role"] == RECALL_ROLE and out[-2]["content"].startswith(RECALL_HEAD)
    assert turns[4] in out or turns[4]["content"] in out[-2]["content"]  # sent, or recalled
    # The same request gives the same body, byte for byte.
    body = upstream.requests[-1].body
    send(proxy, [*turns, question])
    assert upstream.requests[-1].body == body
    assert orjson.loads(body)["messages"][0]["content"] == "You are a kind assistant."


def test_a_claude_chat_with_cache_points_is_read_back_from_the_cache(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, fake_upstream_server: Any
) -> None:
    """A Claude chat that marks the end of each request with a cache point, turn by turn
    through /v1/messages past its budget (the policy leaves chats per request: the cache
    points alone make the proxy cut in steps). The fake upstream bills as Anthropic's
    prompt cache does: at least half of the prompt tokens are read back from it, every
    body is one the API takes, and each row prices the writes at the write price."""
    _, base = fake_upstream_server
    model = "claude-sonnet-4-6"
    (policies_dir / "default.yaml").write_text(
        f"upstream: {{anthropic: {{base_url: '{base}'}}}}\n"
        f"models:\n  {model}: {{context_window: 12000}}\n"
    )
    proxy = start_proxy()
    upstream.mode = "cache"
    sdk = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-client", max_retries=0)
    turns = conversation(120, words=40)
    reads = prompts = 0
    for t in range(0, len(turns), 2):
        history = [dict(m) for m in turns[: t + 1]]
        last = history[-1]
        history[-1] = {"role": "user", "content": [
            {"type": "text", "text": last["content"], "cache_control": {"type": "ephemeral"}}
        ]}  # fmt: skip
        reply = sdk.messages.create(
            model=model, max_tokens=256, system="You are a kind assistant.",
            messages=history,  # type: ignore[arg-type]
        )  # fmt: skip
        usage = reply.usage
        prompt = usage.input_tokens + (usage.cache_read_input_tokens or 0)
        prompt += usage.cache_creation_input_tokens or 0
        if t >= 80:  # past the budget: the trimmed turns
            reads += usage.cache_read_input_tokens or 0
            prompts += prompt
    assert all(problem(r.json()) is None for r in upstream.messages_requests)
    assert prompts and reads >= 0.5 * prompts, (reads, prompts)
    rows = usage_rows(proxy, at_least=len(upstream.messages_requests))
    assert rows[-1]["tokens_before"] > rows[-1]["budget"]  # trimmed
    written = [r for r in rows if r["cost_usd"] and r["prompt_tokens"]]
    assert written
