"""Crafted text that once held the event loop for seconds, by shape and at any size.

Shared by the tests (what the scanners make of it) and tests/bench/bench_scan.py (how long
they take, against a raw tokenizer pass over the same text). The old code took 13 s for
20 KB of attribute text, 9 s for a 20 KB heading line, 1.6 s for 25,000 unbalanced
openers, seconds of settling for many summaries of one cluster.
"""

from __future__ import annotations

import time
from typing import Any

import proxy.planner.budget.allocation as planner_module
from proxy.planner.request import PlanOutcome, plan_request
from proxy.policy.model import ModelPolicy, Policy, TagsPolicy
from proxy.tokens.counter import TokenCounter

MB = 1_000_000


def fill(unit: str, size: int = MB) -> str:
    return unit * max(1, size // len(unit))


def hostile_blocks(size: int = MB) -> dict[str, str]:
    half = size // 2
    return {
        # old: 20 KB took 13 s (the attribute pattern retried at every letter of a name)
        "attribute name without =": "<context " + "a" * size + ">x</context>",
        "name then unclosed quote": "<context " + "a" * half + '="' + "b" * half + ">x</context>",
        "a= repeated, no >": "<context " + fill("a=", size) + "</context>",
        'a=" repeated': "<context " + fill('a="', size) + ">x</context>",
        # old: 225 KB took 1.6 s (each opener looked for its close to the end)
        "unbalanced openers": fill("<context>", size) + "</context>",
        "openers without close": fill('<context section="memory">', size),
        "self-closing": fill("<context />", size) + "</context>",
        "opener, no angle": fill("<context a", size),
    }


def hostile_headings(size: int = MB) -> dict[str, str]:
    return {
        # old: 20 KB took 9 s (the lazy title against the trailing run of spaces and #)
        "spaced #": "# a" + fill(" #", size) + "x",
        "spaces, tabs and #": "# " + fill(" \t#", size) + "x\n",
        "spaces, no newline": "# " + " " * size + "x",
        "many heading lines": fill("## Memory ##  \n# x\n", size),
        "hashes only": "#" * size,
    }


# The tag and heading grammar's pieces, for generated hostile text.
PIECES = [
    "<context", "<context ", "<context>", "</context>", "<contextual>", "<context />",
    " ", "\t", "\n", "\r\n", "=", '"', "'", ">", "<", "/", "a", "section", "memory", "id",
    "-", "1", "é", ":", "#", "## ", "# Memory", "```", "   ~~~", "    ```", "######",
    "####### x", "## Goal:", "# Working state #", "\r", "\x0b", "\x1c", "\u2028",
]  # fmt: skip


def clusters(n: int, shared: bool) -> dict[str, Any]:
    """A body of `n` memory facts, each with a summary the client sends: all of one cluster
    (`shared`) or each of its own. At n = 4,000, about 1 MB."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "rules"}]
    for i in range(n):
        cluster = "c" if shared else f"c{i}"
        messages.append(
            {
                "role": "user",
                "content": f"fact {i} " * 10,
                "x_context": {"cluster": cluster, "section": "memory"},
            }
        )
        messages.append(  # a summary the client sends (an assistant's tag would not be read)
            {"role": "user", "content": f"sum {i}", "x_context": {"summary_of": cluster}}
        )
    messages.append({"role": "user", "content": "q"})
    return {"model": "gpt-4o", "messages": messages}


def repeated_summaries(count: int = 1600) -> list[dict[str, Any]]:
    """Memory of 1,000 lines and `count` summaries each repeating 600 characters of it
    (about 1 MB at 1,600): what dedupe compares line by line."""
    lines = "\n".join(f"- {'1' * 50}{i} fact" for i in range(1000))
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": lines, "x_context": {"section": "memory"}}
    ]
    messages += [
        {
            "role": "user",
            "content": f"{lines[:600]}\nnew {i}",
            "x_context": {"section": "conversation_summary"},
        }
        for i in range(count)
    ]
    messages.append({"role": "user", "content": "q"})
    return messages


def settle_calls(body: dict[str, Any], window: int) -> list[tuple[float, Any]]:
    """Each call of the planner's `settle` while `body` is planned for a gpt-4o of `window`
    tokens: the seconds it took and what it returned (a Substitution)."""
    real = planner_module.settle
    calls: list[tuple[float, Any]] = []

    def recorded(*args: Any) -> Any:
        start = time.perf_counter()
        sub = real(*args)
        calls.append((time.perf_counter() - start, sub))
        return sub

    planner_module.settle = recorded  # type: ignore[assignment]
    try:
        policy = Policy(models={"gpt-4o": ModelPolicy(context_window=window)})
        plan_request(body, policy, TokenCounter().for_model("gpt-4o", policy), window)
    finally:
        planner_module.settle = real
    return calls


# Tags read in the user's text too: the worst case for a hostile user message.
TAGS_IN_USER = Policy(
    models={"gpt-4o": ModelPolicy(context_window=400_000)}, tags=TagsPolicy(inline_in_user=True)
)


def plan_in_user_text(text: str, tokenizer: Any) -> PlanOutcome:
    """`text` planned as a user message (between a system rule and a question) under
    TAGS_IN_USER."""
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "rules"},
            {"role": "user", "content": text},
            {"role": "user", "content": "q"},
        ],
    }
    return plan_request(body, TAGS_IN_USER, tokenizer, 400_000)
