"""Planning: the façade — a chat-completion body in, the body to forward and a report out.

Tag, count, and when over budget plan, trim, then count the result again: counts are not
additive over pieces of a message, so the plan is tightened until the real count fits.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from proxy.errors import ContextLengthExceeded
from proxy.planner.agent_cache import is_agent_loop, plan_anchored
from proxy.planner.allocation import Plan, Planner
from proxy.planner.budget import compute_budget
from proxy.planner.budget_note import budget_note, note_cost
from proxy.planner.cache_plan import plan_stable
from proxy.planner.costs import measure, overhead, untagged_counts
from proxy.planner.extra_summaries import SUMMARY_PREFIX, ExtraSummary, add_summaries
from proxy.planner.fit import Fit, count_forwarded, known_counts
from proxy.planner.items import Action, Decision, Layout
from proxy.planner.outcome import PlanOutcome, outcome, unplanned
from proxy.planner.refusal import Refused, no_report
from proxy.planner.report import PlanReport, build_report
from proxy.planner.sections import build_layout
from proxy.planner.trim import with_note
from proxy.policy import Policy
from proxy.relevance import TermIndex
from proxy.types import Body, Priority, Tokenizer

__all__ = ["SUMMARY_PREFIX", "ExtraSummary", "PlanOutcome", "plan_request", "unplanned"]


def max_output(body: Body) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def plan_request(
    body: Body,
    policy: Policy,
    tokenizer: Tokenizer,
    context_window: int | None,
    *,
    extra_summaries: Sequence[ExtraSummary] = (),
    terms: TermIndex | None = None,
    cache: bool = True,
) -> PlanOutcome:
    """What to forward for `body` under `policy`; raises ContextLengthExceeded when the
    required parts alone exceed the budget and the policy says reject. `terms` keeps the
    history's words between requests (relevance scoring); without it nothing is kept.
    `cache`: False plans without cache mode even where the policy turns it on."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        messages = []
    budget = compute_budget(
        context_window, policy.budget.ratio, policy.budget.reserve_output, max_output(body)
    )
    totals = (budget, context_window)
    names = (tokenizer.name, tokenizer.estimated)
    alongside = None
    if policy.history.relevance == "bm25":
        terms = terms if terms is not None else TermIndex()
        # Read while a long new history is counted (in a thread): relevance needs its
        # words if it is over the budget. Only while the count runs: within the budget
        # the rest is not needed (not now, at least), and over it relevance reads the rest.
        alongside = partial(_read_history, messages, terms)
    known = (
        None if policy.visibility.prompt_report else untagged_counts(messages, tokenizer, alongside)
    )
    fixed: int | None = None
    if known is not None:
        # The common case, kept lean: count (cached per message) and compare.
        # Untagged: forwarded as they are, every one a dict (untagged_counts checked), so
        # the body itself is what is counted: no copy of it per request.
        fixed = (
            tokenizer.count_request_overhead(body)
            if messages is body.get("messages")
            else overhead(tokenizer, body, messages)
        )
        before = sum(known) + fixed
        if budget is None or before <= budget:
            return outcome(
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
    stripped = layout.stripped
    if fixed is None:
        fixed = overhead(tokenizer, body, stripped)
    before = sum(full) + fixed
    note = policy.visibility.prompt_report and budget is not None
    if note and budget is not None:
        required = fixed + sum(
            c for c, p in zip(layout.cost, layout.priority, strict=True) if p is Priority.REQUIRED
        )
        if required + note_cost(tokenizer, budget, stripped) > budget:
            note = False  # the note is a courtesy: never the reason a request fails
            layout.problems.append("no room for the context budget note")
    decisions: dict[int, Decision] = {}
    plan: Plan | None = None
    if budget is None:
        out = stripped
        for k, c in enumerate(layout.cost):
            decisions[k] = Decision(Action.KEEP, "no context window known", tokens=c)
    elif before + (note_cost(tokenizer, budget, stripped) if note else 0) <= budget:
        out = stripped
    else:
        if cache and policy.cache.enabled and context_window is not None:
            stable = _plan_cache_mode(
                body, policy, tokenizer, layout, full, (budget, fixed, before), terms,
                context_window, extra_summaries,
            )  # fmt: skip
            if stable is not None:
                return stable
        add_summaries(layout, extra_summaries, tokenizer, policy)
        # One planner for every try: what it works out before the budget is shared.
        planner = Planner(layout, policy, tokenizer, context_window, terms)
        fit = Fit(planner, layout, policy, tokenizer, body, budget, fixed, full)
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
            try:
                result = fit.run(False)
            except ContextLengthExceeded as exc:  # refused: say by how much (refusal.py)
                why = outcome(body, body, False, totals, before, 0, {}, [], names, no_report)
                raise Refused(exc.message, why) from None
        plan, out, after = result
    if note and budget is not None and plan is None:
        out = with_note(out, budget_note(layout, decisions, budget, before))
    if plan is None:  # as it came (then every count is known), or with the note
        after = (
            before
            if out is stripped
            else count_forwarded(tokenizer, body, out, known_counts(layout, full))
        )
    # A plan that kept every message as it came (a cut of required parts that found nothing
    # to cut) changes nothing either: the original bytes go.
    changed = layout.tagged or bool(note) or (plan is not None and not _same(out, stripped))
    allocated = plan.allocated if plan is not None else None

    def report() -> PlanReport:
        made = plan.decisions if plan is not None else decisions
        return build_report(layout, made, policy, (*totals, before, after), names, allocated)

    if plan is None:
        counts: Mapping[Action, int] = Counter(map(_action, decisions.values()))
    elif plan.counts is not None:
        counts = plan.counts
    else:
        counts = Counter(map(_action, plan.decisions.values()))

    forwarded = {**body, "messages": out} if changed else body
    return outcome(
        body,
        forwarded,
        changed,
        totals,
        before,
        after,
        counts,
        layout.problems,
        names,
        report,
    )


_action = operator.attrgetter("action")

# Texts read per step beside a count (a step takes well under a millisecond).
_READ_STEP = 16


def _plan_cache_mode(
    body: Body,
    policy: Policy,
    tokenizer: Tokenizer,
    layout: Layout,
    full: Sequence[int],
    totals: tuple[int, int, int],
    terms: TermIndex | None,
    context_window: int,
    extra_summaries: Sequence[ExtraSummary],
) -> PlanOutcome | None:
    """Cache mode: an agent loop planned as of its last step boundary (agent_cache.py), a
    conversation cut at a stable point (cache_plan.py); None: the ordinary plan decides."""
    budget, _, before = totals
    if is_agent_loop(layout, full):

        def plan_at(part: Body, at_policy: Policy, window: int) -> PlanOutcome:
            return plan_request(part, at_policy, tokenizer, window, terms=terms, cache=False)

        return plan_anchored(
            body, policy, layout, full, (budget, before), tokenizer, terms, plan_at,
            context_window,
        )  # fmt: skip
    inner = partial(
        plan_request, policy=policy, tokenizer=tokenizer,
        context_window=context_window, terms=terms, cache=False,
    )  # fmt: skip
    return plan_stable(
        body, policy, tokenizer, layout, full, totals, terms, inner, extra_summaries
    )


def _read_history(messages: list[Any], terms: TermIndex, counting: Callable[[], bool]) -> None:
    texts = [m["content"] for m in messages if type(m.get("content")) is str]
    for start in range(0, len(texts), _READ_STEP):
        if not counting():
            return
        terms.read(texts[start : start + _READ_STEP])


def _same(out: list[Any], messages: list[Any]) -> bool:
    """Whether `out` is `messages`, the very same objects in the same order."""
    return len(out) == len(messages) and all(map(operator.is_, out, messages))


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
    decisions = {k: Decision(Action.KEEP, reason, tokens=c) for k, c in enumerate(layout.cost)}
    return build_report(layout, decisions, policy, (*totals, tokens, tokens), names)
