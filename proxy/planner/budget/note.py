"""Budget note: the optional "Context budget: 3,200/4,000 tokens ..." line for the system prompt."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.planner.parts import Decision, Layout
from proxy.types import Section, Tokenizer


def budget_note(
    layout: Layout, decisions: dict[int, Decision], budget: int, used: int | None
) -> str:
    """The budget visibility block appended to the system prompt."""
    per: dict[str, int] = {}
    dropped = 0
    cost = layout.cost
    for k, section in enumerate(layout.section):
        d = decisions.get(k)
        if d is None or d.kept:
            per[section.value] = per.get(section.value, 0) + (d.tokens if d else cost[k])
        else:
            dropped += 1
    total = used if used is not None else sum(per.values())
    share = f" ({100 * total // budget}%)" if budget else ""
    sections = ", ".join(f"{name} {n:,}" for name, n in per.items() if n)
    trimmed = f"; {dropped} item(s) left out to fit" if dropped else ""
    return f"Context budget: {total:,}/{budget:,} tokens{share}{trimmed}. By section: {sections}."


def note_cost(tokenizer: Tokenizer, budget: int, messages: Sequence[Any]) -> int:
    """A generous estimate of the note's tokens, numbers at their widest."""
    names = ", ".join(f"{s.value} {budget:,}" for s in Section)
    sample = (
        f"Context budget: {budget:,}/{budget:,} tokens (100%); {budget} item(s) left out to fit."
        f" By section: {names}."
    )
    has_system = any(
        isinstance(m, dict) and m.get("role") in ("system", "developer") for m in messages
    )
    return tokenizer.count_text(sample) + (2 if has_system else 4)
