"""The lean path for plain chat (proxy.planner.plain_plan) decides exactly as the general path.

Random untagged conversations (tool groups, results out of place, repeats, system prompts
with and without heading sections, messages without content) under random policies: the
forwarded body, every count, the problems and the whole report must be the same whether
the lean path plans the request or the general path does.
"""

from __future__ import annotations

import copy
from typing import Any
from unittest import mock

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.errors import ContextLengthExceeded
from proxy.planner import request as planning
from proxy.planner.plain_plan import plan_plain
from proxy.planner.request import ExtraSummary, plan_request
from proxy.policy.model import (
    DEFAULT_SECTIONS,
    BudgetPolicy,
    HistoryPolicy,
    Policy,
    SectionPolicy,
    VisibilityPolicy,
)
from proxy.tokens.counter import TokenCounter
from proxy.types import Overflow, Priority, Section, Strategy, Tokenizer
from tests.planner_fakes import WordTokenizer

WORDS = WordTokenizer()
REAL = TokenCounter().for_model("gpt-4o-mini", Policy())
VOCAB = ["alpha", "beta", "tea", "Paris", "zebra", "ledger", "refund", "x", "the", "日本語"]
# Long texts drawn from a small pool: repeats (64 characters or more) are deduped.
REPEATED = [" ".join(VOCAB[(k + i) % len(VOCAB)] for i in range(24)) for k in range(3)]

short = st.lists(st.sampled_from(VOCAB), min_size=0, max_size=40).map(" ".join)
long = st.integers(40, 160).map(lambda n: " ".join(VOCAB[i % 7] for i in range(n)))
text_st = st.one_of(short, st.sampled_from(REPEATED), st.just(""), long)


@st.composite
def plain_chats(draw: st.DrawFn) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        system = draw(text_st)
        if draw(st.booleans()):
            system += draw(st.sampled_from(["\n# Rules\nbe kind", "\n## Memory\n- tea"]))
        msgs.append({"role": draw(st.sampled_from(["system", "developer"])), "content": system})
    calls = 0
    pending: list[str] = []  # tool results not sent yet
    for _ in range(draw(st.integers(0, 16))):
        kind = draw(st.sampled_from(["user", "assistant", "user", "tool", "late", "none", "fn"]))
        if kind == "tool":
            ids = [f"c{calls}_{k}" for k in range(draw(st.integers(1, 3)))]
            calls += 1
            function = {"name": "f", "arguments": "{}"}
            made = [{"id": i, "type": "function", "function": function} for i in ids]
            msgs.append({"role": "assistant", "content": None, "tool_calls": made})
            now = draw(st.integers(0, len(ids)))
            msgs += [
                {"role": "tool", "tool_call_id": i, "content": draw(text_st)} for i in ids[:now]
            ]
            pending += ids[now:]
        elif kind == "late" and pending:
            msgs.append({"role": "tool", "tool_call_id": pending.pop(0), "content": draw(text_st)})
        elif kind == "fn":
            msgs.append(
                {
                    "role": "assistant",
                    "content": None,
                    "function_call": {"name": "g", "arguments": "{}"},
                }
            )
            if draw(st.booleans()):
                msgs.append({"role": "function", "name": "g", "content": draw(text_st)})
        elif kind == "none":
            msgs.append({"role": draw(st.sampled_from(["user", "assistant"])), "content": None})
        else:
            msgs.append({"role": kind if kind != "late" else "user", "content": draw(text_st)})
        if draw(st.integers(0, 5)) == 0:
            msgs.append(copy.deepcopy(draw(st.sampled_from(msgs))))  # a repeat, any kind
        if draw(st.integers(0, 6)) == 0:  # keys that change what is plain text
            msgs[-1] = {**msgs[-1], **draw(st.sampled_from([{"name": "bob"}, {"tool_calls": []}]))}
    msgs.append({"role": "user", "content": draw(text_st)})
    if draw(st.integers(0, 4)) == 0 and pending:
        msgs.append({"role": "tool", "tool_call_id": pending[0], "content": draw(text_st)})
    return msgs


def _recent(overflow: Overflow, strategy: Strategy) -> dict[Section, SectionPolicy]:
    sections = dict(DEFAULT_SECTIONS)
    sections[Section.RECENT_MESSAGES] = SectionPolicy(0.35, Priority.HIGH, overflow, strategy)
    return sections


policies = st.builds(
    lambda overflow, relevance, keep, neighbors, sections, ratio: Policy(
        budget=BudgetPolicy(ratio=ratio, on_required_overflow=overflow),
        history=HistoryPolicy(keep_recent=keep, relevance=relevance, neighbors=neighbors),
        visibility=VisibilityPolicy(prompt_report=False),
        sections=sections,
    ),
    st.sampled_from(["reject", "truncate"]),
    st.sampled_from(["bm25", "off"]),
    st.integers(0, 4),
    st.integers(0, 2),
    st.sampled_from(
        [DEFAULT_SECTIONS] * 4
        + [_recent(Overflow.TRUNCATE, Strategy.RECENT), _recent(Overflow.DROP, Strategy.SCORE)]
    ),
    st.sampled_from([0.8, 0.5, 1.0]),
)


def outcome(
    body: dict[str, Any],
    policy: Policy,
    tokenizer: Tokenizer,
    window: int,
    extra: list[ExtraSummary],
    tools: bool,
) -> bytes:
    if tools:
        body = {**body, "tools": [{"type": "function", "function": {"name": "f"}}]}
    try:
        out = plan_request(copy.deepcopy(body), policy, tokenizer, window, extra_summaries=extra)
    except ContextLengthExceeded as exc:
        return orjson.dumps({"error": str(exc)})
    fields = ("changed", "budget", "tokens_before", "tokens_after", "dropped", "truncated")
    fields += ("summarized", "deduped", "trimmed", "problems", "estimated")
    seen = {name: getattr(out, name) for name in fields}
    seen["body"], seen["report"] = out.body, out.report.to_json()
    return orjson.dumps(seen)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    plain_chats(),
    policies,
    st.integers(10, 1500),
    st.booleans(),
    st.sampled_from([(), (), (), (0, 1), (0, 99)]),
    st.booleans(),
)
def test_lean_path_decides_as_the_general_path(
    msgs: list[dict[str, Any]],
    policy: Policy,
    window: int,
    real: bool,
    span: tuple[int, ...],
    tools: bool,
) -> None:
    tokenizer = REAL if real else WORDS
    extra = [ExtraSummary(*span, "a summary")] if span else []
    body = {"model": "m", "messages": msgs}
    lean = outcome(body, policy, tokenizer, window, extra, tools)
    with mock.patch.object(planning, "plan_plain", lambda *args: None):
        general = outcome(body, policy, tokenizer, window, extra, tools)
    assert lean == general


def test_lean_path_plans_plain_chat() -> None:
    """The lean path does take a plain conversation over budget (else the test above
    would compare the general path with itself)."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
    for i in range(40):
        msgs.append({"role": "user" if i % 2 else "assistant", "content": f"turn {i} " * 20})
    body = {"model": "m", "messages": msgs}
    results: list[object] = []

    def spy(*args: Any) -> object:
        results.append(plan_plain(*args))
        return results[-1]

    with mock.patch.object(planning, "plan_plain", spy):
        out = plan_request(body, Policy(), WORDS, 400)
    assert len(results) == 1 and results[0] is not None
    assert out.dropped > 0 and out.tokens_after <= 320
