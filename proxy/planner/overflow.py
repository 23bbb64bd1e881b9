"""Overflow: the required parts alone exceed the budget -> reject, or cut them."""

from __future__ import annotations

from proxy.errors import ContextLengthExceeded
from proxy.planner.budget import cut_required
from proxy.planner.items import MARKER, Action, Decision, Item, Kind, Layout
from proxy.policy import Policy
from proxy.types import Section, Tokenizer

_OVERFLOW = "required parts over the budget by "


def overflow(
    layout: Layout,
    policy: Policy,
    tokenizer: Tokenizer,
    window: int | None,
    required: list[Item],
    over: tuple[int, int, int, int],
) -> dict[int, Decision]:
    """Decisions when `required` items alone exceed the budget: reject (raises
    ContextLengthExceeded), or cut them, current turn last. `over`: (excess tokens, budget,
    request overhead, marker tokens)."""
    excess, budget, fixed, marker = over
    by_section: dict[Section, int] = {}
    for it in required:
        by_section[it.section] = by_section.get(it.section, 0) + it.cost
    total = sum(by_section.values()) + fixed
    if policy.budget.on_required_overflow != "truncate":
        parts = ", ".join(f"{s.value} {n:,}" for s, n in by_section.items())
        within = f" (context window {window:,})" if window is not None else ""
        raise ContextLengthExceeded(
            f"The required parts of this request need {total:,} tokens but the budget is "
            f"{budget:,}{within}: {parts}, request overhead {fixed:,}. Shorten the system "
            "prompt or the last message, or use a model with a larger context window."
        )
    sizes = [
        (it.key, tokenizer.count_text(it.text), it.current)
        for it in required
        if it.kind is not Kind.OPAQUE and it.text
    ]
    cuts = cut_required(sizes, excess, marker)
    # Said once, with the first plan's excess: the re-plans that tighten the target (see
    # fit.Fit.run) would each add a larger, made-up figure.
    if not any(p.startswith(_OVERFLOW) for p in layout.problems):
        layout.problems.append(f"{_OVERFLOW}{excess:,} tokens: cut, current turn last")
    decisions: dict[int, Decision] = {}
    for it in layout.items:
        if not it.required:
            decisions[it.key] = Decision(
                Action.DROP, "no room: the required parts exceed the budget"
            )
        elif it.key in cuts:
            tokens = tokenizer.count_text(it.text)
            kept = tokenizer.truncate_text(it.text, tokens - cuts[it.key])
            after = it.cost - cuts[it.key] + marker
            decisions[it.key] = Decision(
                Action.TRUNCATE, "required parts over budget: cut", kept + MARKER, after
            )
        else:
            decisions[it.key] = Decision(Action.KEEP, "required", tokens=it.cost)
    return decisions
