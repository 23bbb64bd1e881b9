"""Fit: plan, trim and re-count until the forwarded messages fit the budget.

Counts are not additive over pieces of a message (a cut text plus its marker may count a
token more than its parts), so each plan is applied and counted for real; when it does
not fit, the planner's target is tightened and it plans again.
"""

from __future__ import annotations

from itertools import compress
from typing import Any

from proxy.errors import ContextLengthExceeded
from proxy.planner.budget.allocation import Plan, Planner
from proxy.planner.budget.note import budget_note, note_cost
from proxy.planner.budget.overflow import over_budget
from proxy.planner.budget.required_parts import describe, limit_phrase, shorten
from proxy.planner.budget.trim import apply, with_note
from proxy.planner.budget.turn_recall import turn_recall, with_recall
from proxy.planner.parts import Counted, Layout, Run, count_message, overhead
from proxy.types import Body, Tokenizer

ATTEMPTS = 8  # plans tried before the last one is sent over budget


def known_counts(layout: Layout, full: list[int]) -> dict[int, int]:
    """Each message as forwarded untrimmed (by identity) -> its count."""
    return dict(zip(map(id, layout.stripped), full, strict=True))


def count_forwarded(tokenizer: Tokenizer, body: Body, out: list[Any], known: dict[int, int]) -> int:
    """Tokens of the forwarded messages; a message forwarded as it came keeps its count."""
    total = 0
    for m in out:
        cost = known.get(id(m))
        total += cost if cost is not None else count_message(tokenizer, m)
    return total + overhead(tokenizer, body, out)


class Fit:
    """Plan, trim and re-count until the forwarded messages fit the budget."""

    def __init__(self, planner: Planner, run: Run, counted: Counted, budget: int) -> None:
        self.planner, self.layout, self.policy = planner, counted.layout, run.policy
        self.tokenizer, self.body, self.budget = run.tokenizer, run.body, budget
        self.fixed, self.full = counted.fixed, counted.full
        self._known: dict[int, int] | None = None  # made when a trimmed plan is counted

    @property
    def known(self) -> dict[int, int]:
        if self._known is None:
            self._known = known_counts(self.layout, self.full)
        return self._known

    def _recalled(self, plan: Plan, out: list[Any], after: int) -> tuple[list[Any], int]:
        """`out` with the recall of the omitted turns (turn_recall.py) in what is left."""
        planner, layout = self.planner, self.layout
        choices = planner.choices
        if choices is None:
            return out, after
        message = turn_recall(planner.state, choices, plan.decisions, self.budget - after)
        if message is None:
            return out, after
        recalled = with_recall(out, message, layout.stripped[layout.current_start])
        counted = count_forwarded(self.tokenizer, self.body, recalled, self.known)
        return (recalled, counted) if counted <= self.budget else (out, after)

    def run(self, note: bool) -> tuple[Plan, list[Any], int]:
        """The plan, the forwarded messages and their count (over budget only when even
        the tightest plan did not fit, or the required parts alone overflow)."""
        layout, tokenizer, budget = self.layout, self.tokenizer, self.budget
        reserve = self.fixed + (note_cost(tokenizer, budget, layout.stripped) if note else 0)
        self.planner.prepare(budget, reserve)
        floor = reserve + sum(self.planner.required()[1].values())
        recall = self.planner.recall
        target = budget - recall
        for attempt in range(ATTEMPTS):
            plan = self.planner.plan(target, reserve)
            if plan.kept is not None and not note and not layout.split and not layout.extra:
                # Every message one item, kept as it came or dropped: no decision needed.
                out = list(compress(layout.stripped, plan.kept))
                counted = sum(compress(self.full, plan.kept))
                after = counted + overhead(tokenizer, self.body, out)
            else:
                out = apply(layout, plan.decisions, self.planner.state.turns)
                if note:
                    out = with_note(out, budget_note(layout, plan.decisions, budget, None))
                after = count_forwarded(tokenizer, self.body, out, self.known)
            if after <= budget or (plan.over and after <= self.planner.limit):
                if recall and not plan.over:
                    out, after = self._recalled(plan, out, after)
                return plan, out, after
            # Tighten faster each round: a cut item can absorb a small step without a change.
            excess = (after - budget) << attempt
            if plan.over:
                excess = (after - self.planner.limit) << attempt
            if target > floor and not plan.over:
                target = max(floor, target - excess)
            elif not plan.over and after <= self.planner.limit:
                # Nothing optional is left: the required parts, with the marks of what was
                # left out, exceed the budget alone, within the window: they go alone, as
                # overflow.py sends them (cutting them further would cut what is required).
                over_budget(layout, after - budget)
                return plan, out, after
            elif self.policy.budget.on_required_overflow == "truncate":
                target -= excess
            else:
                planner = self.planner
                required, by_section = planner.required()
                window, answer = planner.window, planner.answer
                limit = limit_phrase(window, answer, planner.limit)
                figures = (after, budget, window, self.fixed)
                named = describe(layout, required, planner.state.cost, figures, limit, answer)
                raise ContextLengthExceeded(
                    named
                    or f"The required parts of this request need {after:,} tokens: over the "
                    f"budget of {budget:,}, and more than {limit}. {shorten(by_section, answer)}, "
                    "or use a model with a larger context window."
                )
        window = self.planner.window
        if window is not None and after > window:  # never forwarded over the window
            raise ContextLengthExceeded(
                f"This request cannot be cut below {after:,} tokens (what cannot be cut: tool "
                f"calls, images, the request's overhead), over the model's context window of "
                f"{window:,}; shorten it or split its tool calls."
            )
        layout.problems.append(f"could not fit the budget of {budget:,} tokens; sent {after:,}")
        return plan, out, after
