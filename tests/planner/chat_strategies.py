"""Random plain chats and policies: what the planner's plain-chat equality tests draw from.

Untagged conversations (tool groups, results out of place, repeats, system prompts with
and without heading sections, messages without content) and policies that vary what
plain chat meets (relevance, keep_recent, the recent_messages section, overflow).
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

from proxy.policy.model import (
    DEFAULT_SECTIONS,
    BudgetPolicy,
    CachePolicy,
    HistoryPolicy,
    Policy,
    SectionPolicy,
    VisibilityPolicy,
)
from proxy.tokens.counter import TokenCounter
from proxy.types import Overflow, Priority, Section, Strategy
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
def plain_chats(draw: st.DrawFn, tools: bool = True) -> list[dict[str, Any]]:
    """A conversation; `tools`: with tool calls and results among its messages."""
    kinds = ["user", "assistant", "user", "tool", "late", "none", "fn"]
    if not tools:
        kinds = ["user", "assistant", "user", "none"]
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        system = draw(text_st)
        if draw(st.booleans()):
            system += draw(st.sampled_from(["\n# Rules\nbe kind", "\n## Memory\n- tea"]))
        msgs.append({"role": draw(st.sampled_from(["system", "developer"])), "content": system})
    calls = 0
    pending: list[str] = []  # tool results not sent yet
    for _ in range(draw(st.integers(0, 16))):
        kind = draw(st.sampled_from(kinds))
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
        cache=CachePolicy(enabled=False),  # the per-request planner, as the lean path was
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
