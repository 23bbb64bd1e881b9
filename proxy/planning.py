"""Planning: the façade — a chat-completion body in, the body to forward and a report out.

Tag, count, and when over budget plan, trim, then count the result again: counts are not
additive over pieces of a message, so the plan is tightened until the real count fits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.budget import compute_budget
from proxy.budget_note import budget_note, note_cost
from proxy.costs import count_message, measure, overhead, well_shaped
from proxy.errors import ContextLengthExceeded
from proxy.extra_summaries import SUMMARY_PREFIX, ExtraSummary, add_summaries
from proxy.items import Action, Decision, Layout
from proxy.plan_report import PlanReport, build_report
from proxy.planner import Plan, Planner
from proxy.policy import Policy
from proxy.relevance import TermIndex
from proxy.sections import build_layout
from proxy.trim import apply, with_note
from proxy.types import Body, Tokenizer

_ATTEMPTS = 8

__all__ = ["SUMMARY_PREFIX", "ExtraSummary", "PlanOutcome", "plan_request", "unplanned"]


@dataclass
class PlanOutcome:
    body: Body
    changed: bool  # False: forward the request's original bytes
    budget: int | None
    context_window: int | None
    tokens_before: int
    tokens_after: int
    dropped: int
    truncated: int
    summarized: int
    deduped: int
    trimmed: int  # x-context-trimmed: messages or segments dropped, truncated or replaced
    problems: list[str]
    estimated: bool
    make_report: Callable[[], PlanReport] = field(repr=False)
    _report: PlanReport | None = field(default=None, init=False, repr=False)

    @property
    def report(self) -> PlanReport:
        """Built on first use: the proxy's hot path needs only the counts above."""
        if self._report is None:
            self._report = self.make_report()
        return self._report


def max_output(body: Body) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _untagged(messages: list[Any]) -> bool:
    """No x_context, no inline tag, nothing of an odd shape: nothing to strip or report."""
    return all(_plain(m) for m in messages)


def _plain(m: Any) -> bool:
    """One message of `_untagged`'s kind."""
    if type(m) is not dict or "x_context" in m:
        return False
    content = m.get("content")
    if type(content) is str:
        # Only a role and a text: well shaped without looking further.
        return _no_tag(content) and ((len(m) == 2 and "role" in m) or well_shaped(m))
    return well_shaped(m) and (
        content is None
        or not any(isinstance(p, dict) and "<context" in str(p.get("text", "")) for p in content)
    )


def _no_tag(text: str) -> bool:
    # A search for one character is several times faster than for "<context", and most
    # texts have no "<" at all.
    return "<" not in text or "<context" not in text


def _untagged_counts(messages: list[Any], tokenizer: Tokenizer) -> list[int] | None:
    """Each message's count when `_untagged(messages)`, else None: one pass for both."""
    counts: list[int] = []
    count = tokenizer.count_message
    for m in messages:  # _plain's common case inlined: this runs per message
        if (
            type(m) is dict
            and len(m) == 2
            and type(content := m.get("content")) is str
            and "role" in m
            and ("<" not in content or "<context" not in content)
        ) or _plain(m):
            counts.append(count(m))
        else:
            return None
    return counts


def plan_request(
    body: Body,
    policy: Policy,
    tokenizer: Tokenizer,
    context_window: int | None,
    *,
    extra_summaries: Sequence[ExtraSummary] = (),
    terms: TermIndex | None = None,
) -> PlanOutcome:
    """What to forward for `body` under `policy`; raises ContextLengthExceeded when the
    required parts alone exceed the budget and the policy says reject. `terms` keeps the
    history's words between requests (relevance scoring); without it nothing is kept."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        messages = []
    budget = compute_budget(
        context_window, policy.budget.ratio, policy.budget.reserve_output, max_output(body)
    )
    totals = (budget, context_window)
    names = (tokenizer.name, tokenizer.estimated)
    known = None if policy.visibility.prompt_report else _untagged_counts(messages, tokenizer)
    if known is not None:
        # The common case, kept lean: count (cached per message) and compare.
        before = sum(known) + overhead(tokenizer, body, messages)
        if budget is None or before <= budget:
            return _outcome(
                body,
                body,
                False,
                totals,
                before,
                before,
                {},
                [],
                names,
                lambda: _report(messages, policy, tokenizer, totals, before, names),
            )
    layout = build_layout(messages, policy, checked=known is not None)
    full = measure(layout, tokenizer, known or ())
    stripped = [ml.stripped for ml in layout.messages]
    fixed = overhead(tokenizer, body, stripped)
    before = sum(full) + fixed
    note = policy.visibility.prompt_report and budget is not None
    if note and budget is not None:
        required = fixed + sum(it.cost for it in layout.items if it.required)
        if required + note_cost(tokenizer, budget, stripped) > budget:
            note = False  # the note is a courtesy: never the reason a request fails
            layout.problems.append("no room for the context budget note")
    decisions: dict[int, Decision] = {}
    plan: Plan | None = None
    if budget is None:
        out = stripped
        for it in layout.items:
            decisions[it.key] = Decision(Action.KEEP, "no context window known", tokens=it.cost)
    elif before + (note_cost(tokenizer, budget, stripped) if note else 0) <= budget:
        out = stripped
    else:
        add_summaries(layout, extra_summaries, tokenizer, policy)
        # One planner for every try: what it works out before the budget is shared.
        planner = Planner(layout, policy, tokenizer, context_window, terms)
        fit = _Fit(planner, layout, policy, tokenizer, body, budget, fixed, full)
        result = None
        if note:
            try:
                result = fit.run(True)
            except ContextLengthExceeded:
                result = None
            if result is None or result[2] > budget:
                result = None
                note = False  # the note is a courtesy: never why a request fails or overflows
                layout.problems.append("no room for the context budget note")
        if result is None:
            result = fit.run(False)
        plan, out, after = result
        decisions = plan.decisions
    if note and budget is not None and plan is None:
        out = with_note(out, budget_note(layout, decisions, budget, before))
    if plan is None:  # as it came (then every count is known), or with the note
        after = before if out is stripped else _count(tokenizer, body, out, _known(layout, full))
    changed = layout.tagged or plan is not None or bool(note)
    allocated = plan.allocated if plan is not None else None

    def report() -> PlanReport:
        return build_report(layout, decisions, policy, (*totals, before, after), names, allocated)

    forwarded = {**body, "messages": out} if changed else body
    return _outcome(
        body, forwarded, changed, totals, before, after, decisions, layout.problems, names, report
    )


def unplanned(body: Body, context_window: int | None, error: str) -> PlanOutcome:
    """The outcome of a request forwarded as it came because planning it failed (a bug in
    the proxy): no budget, no counts, nothing trimmed, and the failure as the one problem."""
    problems = [f"planning failed ({error}); forwarded as it came"]

    def report() -> PlanReport:
        raise RuntimeError(problems[0])

    return _outcome(
        body, body, False, (None, context_window), 0, 0, {}, problems, ("unknown", True), report
    )


def _outcome(
    body: Body,
    forwarded: Body,
    changed: bool,
    totals: tuple[int | None, int | None],
    before: int,
    after: int,
    decisions: dict[int, Decision],
    problems: list[str],
    names: tuple[str, bool],
    report: Callable[[], PlanReport],
) -> PlanOutcome:
    counts = Counter(d.action for d in decisions.values())
    trimmed = sum(
        counts[a] for a in (Action.DROP, Action.TRUNCATE, Action.DEDUPE, Action.SUMMARIZE)
    )
    return PlanOutcome(
        body=forwarded,
        changed=changed,
        budget=totals[0],
        context_window=totals[1],
        tokens_before=before,
        tokens_after=after,
        dropped=counts[Action.DROP],
        truncated=counts[Action.TRUNCATE],
        summarized=counts[Action.SUMMARIZE],
        deduped=counts[Action.DEDUPE],
        trimmed=trimmed,
        problems=problems,
        estimated=names[1],
        make_report=report,
    )


def _report(
    messages: list[Any],
    policy: Policy,
    tokenizer: Tokenizer,
    totals: tuple[int | None, int | None],
    tokens: int,
    names: tuple[str, bool],
) -> PlanReport:
    """The report of a request forwarded as it came: every item kept."""
    layout = build_layout(messages, policy)
    measure(layout, tokenizer)
    reason = "within budget" if totals[0] is not None else "no context window known"
    decisions = {it.key: Decision(Action.KEEP, reason, tokens=it.cost) for it in layout.items}
    return build_report(layout, decisions, policy, (*totals, tokens, tokens), names)


def _known(layout: Layout, full: list[int]) -> dict[int, int]:
    """Each message as forwarded untrimmed (by identity) -> its count."""
    return {id(ml.stripped): cost for ml, cost in zip(layout.messages, full, strict=True)}


def _count(tokenizer: Tokenizer, body: Body, out: list[Any], known: dict[int, int]) -> int:
    """Tokens of the forwarded messages; a message forwarded as it came keeps its count."""
    total = 0
    for m in out:
        cost = known.get(id(m))
        total += cost if cost is not None else count_message(tokenizer, m)
    return total + overhead(tokenizer, body, out)


class _Fit:
    """Plan, trim and re-count until the forwarded messages fit the budget."""

    def __init__(
        self,
        planner: Planner,
        layout: Layout,
        policy: Policy,
        tokenizer: Tokenizer,
        body: Body,
        budget: int,
        fixed: int,
        full: list[int],
    ) -> None:
        self.planner, self.layout, self.policy = planner, layout, policy
        self.tokenizer, self.body, self.budget, self.fixed = tokenizer, body, budget, fixed
        self.known = _known(layout, full)

    def run(self, note: bool) -> tuple[Plan, list[Any], int]:
        """The plan, the forwarded messages and their count (over budget only when even
        the tightest plan did not fit, or the required parts alone overflow)."""
        layout, tokenizer, budget = self.layout, self.tokenizer, self.budget
        reserve = self.fixed + (
            note_cost(tokenizer, budget, [ml.stripped for ml in layout.messages]) if note else 0
        )
        floor = reserve + sum(it.cost for it in layout.items if it.required)
        target = budget
        for attempt in range(_ATTEMPTS):
            plan = self.planner.plan(target, reserve)
            out = apply(layout, plan.decisions)
            if note:
                out = with_note(out, budget_note(layout, plan.decisions, budget, None))
            after = _count(tokenizer, self.body, out, self.known)
            if after <= budget:
                return plan, out, after
            # Tighten faster each round: a cut item can absorb a small step without a change.
            excess = (after - budget) << attempt
            if target > floor:
                target = max(floor, target - excess)
            elif self.policy.budget.on_required_overflow == "truncate":
                target -= excess
            else:
                raise ContextLengthExceeded(
                    f"The required parts of this request need {after:,} tokens but the budget "
                    f"is {budget:,}; shorten the system prompt or the last message."
                )
        layout.problems.append(f"could not fit the budget of {budget:,} tokens; sent {after:,}")
        return plan, out, after
