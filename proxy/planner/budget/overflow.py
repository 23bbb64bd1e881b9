"""Overflow: the required parts alone exceed the budget -> fewer protected exchanges, or the
required parts alone within the context window, or past it a refusal or a cut."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from proxy.errors import ContextLengthExceeded
from proxy.planner.budget.agent_overflow import agent_overflow
from proxy.planner.budget.grants import cut_required
from proxy.planner.budget.required_parts import describe, limit_phrase, shorten
from proxy.planner.budget.setup_cut import MIN_SETUP_PART
from proxy.planner.budget.state import PlanState
from proxy.planner.parts import MESSAGE, Action, Decision, Kind, Layout, cut_marker
from proxy.types import Priority, Section

_OVERFLOW = "required parts over the budget by "
ALONE = "forwarded alone, within the context window"
NO_ROOM = "no room: the required parts fill the budget"
_FEWER = "protected tool exchanges over the budget by "
_OPERATOR = ("system", "developer")


@dataclass(frozen=True, slots=True)
class Over:
    """A plan's figures when its required parts alone exceed its target: the excess over
    the target, the target, the request's overhead, the marker's tokens, and the limit the
    required parts may take alone (the context window less the answer's reserve)."""

    excess: int
    budget: int
    fixed: int
    marker: int
    limit: int
    answer: int  # the tokens max_tokens keeps for the answer (0: none)


def overflow(
    state: PlanState,
    window: int | None,
    required: list[int],
    by_section: Mapping[Section, int],
    over: Over,
) -> dict[int, Decision]:
    """Decisions when `required` items (keys) alone exceed the budget: fewer of the newest
    exchanges the proxy protects; else the required parts alone while they fit the limit;
    past it, reject (raises ContextLengthExceeded) or cut them to it, current turn last."""
    excess, budget, fixed, marker = over.excess, over.budget, over.fixed, over.marker
    layout, policy, tokenizer = state.layout, state.policy, state.tokenizer
    cost, kind, text_of = state.cost, layout.kind, state.text_of
    total = sum(by_section.values()) + fixed
    # The newest tool exchanges are protected by the proxy, not required by the client:
    # fewer of them, and the newest one's largest result cut, before anything else.
    cut = policy.budget.on_required_overflow == "truncate"
    fewer = agent_overflow(layout, tokenizer, required, excess, cut and total > over.limit)
    if fewer is not None:
        if not any(p.startswith(_FEWER) for p in layout.problems):
            layout.problems.append(f"{_FEWER}{excess:,} tokens: fewer kept, newest cut")
        if state.opening is not None:
            fewer.update(state.opening.decisions())
        return fewer
    if total <= over.limit:  # over the budget, within the window: the required parts alone
        over_budget(layout, excess)
        return alone(state, required)
    if not cut:
        figures = (total, budget, window, fixed)
        limit = limit_phrase(window, over.answer, over.limit)
        named = describe(layout, required, cost, figures, limit, over.answer)
        if named is not None:
            raise ContextLengthExceeded(named)
        parts = ", ".join(f"{s.value} {n:,}" for s, n in by_section.items() if n)
        hint = shorten(by_section, over.answer)
        raise ContextLengthExceeded(
            f"The required parts of this request need {total:,} tokens: over the budget of "
            f"{budget:,}, and more than {limit}: "
            f"{parts}, request overhead {fixed:,}. {hint}, or use a model with a larger "
            "context window."
        )
    excess = total - over.limit  # cut to the limit: within it, they would go whole
    msg, units, unit_of, role = layout.msg, layout.units, layout.unit_of, layout.role
    # Cut last: the operator's text (the system prompt: never while anything else could be
    # cut), and before it the current turn's own messages (the last user message). Its tool
    # exchanges are cut by size with everything else: the newest tool result of 5,000
    # tokens before a 10-token system prompt.
    sizes = [
        (
            k,
            tokenizer.count_text(text_of(k)),
            2
            if role[k] in _OPERATOR
            else int(
                layout.in_current(msg[k])
                and kind[k] is not Kind.SUMMARY
                and len(units[unit_of[msg[k]]]) == 1
            ),
        )
        for k in required
        if kind[k] is not Kind.OPAQUE and text_of(k)
    ]
    cuts = _cuts(layout, sizes, excess, marker)
    # Said once, with the first plan's excess: the re-plans that tighten the target (see
    # fit.Fit.run) would each add a larger, made-up figure.
    if not any(p.startswith(_OVERFLOW) for p in layout.problems):
        layout.problems.append(
            f"{_OVERFLOW}{over.excess:,} tokens and the context window's limit by "
            f"{excess:,}: cut, the current turn and the system prompt last"
        )
    decisions: dict[int, Decision] = state.opening.decisions() if state.opening else {}
    is_required = Priority.REQUIRED
    for k, p in enumerate(layout.priority):
        if k in decisions:
            continue
        if p is not is_required:
            decisions[k] = Decision(Action.DROP, "no room: the required parts exceed the budget")
        elif k in cuts:
            tokens = tokenizer.count_text(text_of(k))
            kept = tokenizer.truncate_text(text_of(k), tokens - cuts[k])
            after = cost[k] - cuts[k] + marker
            mark = cut_marker(layout.recall_id(MESSAGE, layout.msg[k]))
            why = "required parts over budget: cut"
            decisions[k] = Decision(Action.TRUNCATE, why, kept + mark, after)
        else:
            decisions[k] = state.preset.get(k) or Decision(Action.KEEP, "required", tokens=cost[k])
    return decisions


def over_budget(layout: Layout, excess: int) -> None:
    """Say, once, that the required parts alone go over the budget by `excess` tokens."""
    if not any(p.startswith(_OVERFLOW) for p in layout.problems):
        layout.problems.append(f"{_OVERFLOW}{excess:,} tokens: {ALONE}")


def alone(state: PlanState, required: list[int]) -> dict[int, Decision]:
    """Decisions forwarding the required parts alone (a setup cut stays cut): everything
    optional dropped."""
    decisions = {k: Decision(Action.DROP, NO_ROOM) for k in range(len(state.layout.priority))}
    preset, cost = state.preset, state.cost
    for k in required:
        decisions[k] = preset.get(k) or Decision(Action.KEEP, "required", tokens=cost[k])
    if state.opening is not None:
        decisions.update(state.opening.decisions())
    return decisions


def _cuts(
    layout: Layout, sizes: list[tuple[int, int, int]], excess: int, marker: int
) -> dict[int, int]:
    """cut_required, with the setup's user parts keeping their first MIN_SETUP_PART tokens
    until everything else was cut (a task cut, not dropped): those go last of all."""
    end, msg, role = layout.setup_end, layout.msg, layout.role
    floor = {k: min(t, MIN_SETUP_PART) for k, t, _ in sizes if msg[k] < end and role[k] == "user"}
    if not floor:
        return cut_required(sizes, excess, marker)
    first = cut_required([(k, t - floor.get(k, 0), r) for k, t, r in sizes], excess, marker)
    left = excess - sum(take - marker for take in first.values())
    if left <= 0:
        return first
    rest = cut_required([(k, floor[k], 0) for k in floor], left + marker * len(floor), marker)
    return {k: first.get(k, 0) + rest.get(k, 0) for k in first.keys() | rest.keys()}
