"""Planning: the façade — a chat-completion body in, the body to forward and a report out.

A request goes through the rooms in order: its run (budget included) is set up, and it is
counted and read into parts (`parts`); within its budget it goes as it came; over it,
cache mode cuts it at a stable point (`cache`) or the budget's planner fits it (`budget`),
drawing on the history's ranking (`history`); the report (`report`) is made when asked
for. Counts are not additive over pieces of a message, so a plan is counted again until
it fits.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from proxy.errors import ContextLengthExceeded
from proxy.planner.budget import (
    Fit,
    Plan,
    Planner,
    budget_note,
    count_forwarded,
    known_counts,
    note_cost,
    with_note,
)
from proxy.planner.cache import plan_cached
from proxy.planner.parts import (
    SUMMARY_PREFIX,
    Action,
    Counted,
    Decision,
    ExtraSummary,
    Kept,
    Offered,
    Run,
    add_summaries,
    build_layout,
    measure,
    overhead,
    start_run,
    untagged_counts,
)
from proxy.planner.report import (
    PlanOutcome,
    PlanReport,
    Refused,
    build_report,
    held_back,
    make_outcome,
    no_report,
    unplanned,
)
from proxy.policy import Policy
from proxy.relevance import TermIndex
from proxy.types import Body, Priority, Tokenizer

__all__ = ["SUMMARY_PREFIX", "ExtraSummary", "Offered", "PlanOutcome", "plan_request", "unplanned"]

NOTHING_OFFERED = Offered()


def plan_request(
    body: Body,
    policy: Policy,
    tokenizer: Tokenizer,
    context_window: int | None,
    *,
    offered: Offered = NOTHING_OFFERED,
    kept: Kept | None = None,
) -> PlanOutcome:
    """What to forward for `body` under `policy`; raises ContextLengthExceeded when the
    required parts alone exceed the budget and the policy says reject. `kept`: what the
    caller keeps between requests (the history's words for relevance, cache mode's plans
    of conversations as of their step boundaries); without it nothing is kept. `offered`:
    proxy-made summaries, and the tokens the caller adds to a request that must be trimmed
    (the recall tool): it is trimmed to that much less than its budget."""
    return _plan(start_run(body, policy, tokenizer, context_window, kept, offered), True)


def _plan(run: Run, cache: bool) -> PlanOutcome:
    """`cache`: False plans without cache mode even where the policy turns it on (cache
    mode's own plans of the request it cut)."""
    body, policy, tokenizer, budget = run.body, run.policy, run.tokenizer, run.budget
    messages = body.get("messages")
    if not isinstance(messages, list):
        messages = []
    alongside = None
    if policy.history.relevance == "bm25" and run.terms is not None:
        # Read while a long new history is counted (in a thread): relevance needs its
        # words if it is over the budget. Only while the count runs: within the budget
        # the rest is not needed (not now, at least), and over it relevance reads the rest.
        alongside = partial(_read_history, messages, run.terms)
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
            report = partial(_report_as_sent, run, messages, before)
            return make_outcome(run, body, (before, before), {}, [], report)
    layout = build_layout(messages, policy, checked=known is not None, setup=run.setup)
    full = measure(layout, tokenizer, known or ())
    if fixed is None:
        fixed = overhead(tokenizer, body, layout.stripped)
    return _fit(run, Counted(layout, full, fixed, sum(full) + fixed), cache)


def _fit(run: Run, counted: Counted, cache: bool) -> PlanOutcome:
    """A request that was tagged, asks for the budget note, or is over its budget."""
    body, policy, tokenizer, budget = run.body, run.policy, run.tokenizer, run.budget
    whole = budget  # the request's budget, whatever is held back of it for the caller
    layout, before = counted.layout, counted.before
    stripped = layout.stripped
    note = policy.visibility.prompt_report and budget is not None
    if note and budget is not None:
        required = counted.fixed + sum(
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
        reserve = run.reserve() if callable(run.reserve) else run.reserve
        if reserve:  # trimmed: to the budget less what the caller will add, if it fits
            # beside what is never cut (an agent's protected exchanges may give way to it)
            required = sum(
                c
                for k, (c, p) in enumerate(zip(layout.cost, layout.priority, strict=True))
                if p is Priority.REQUIRED and not layout.group(layout.msg[k])
            )
            if counted.fixed + required + reserve <= budget:
                budget -= reserve
                run = replace(run, budget=budget, held=reserve)
            run = replace(run, reserve=0)
        if cache and policy.cache.enabled and run.window is not None:
            plan_at = partial(_plan_at, replace(run, setup=layout.setup_end))
            stable = plan_cached(run, counted, plan_at)
            if stable is not None:
                return held_back(stable, run.held, whole)
        add_summaries(layout, run.summaries, tokenizer, policy)
        # One planner for every try: what it works out before the budget is shared.
        planner = Planner(layout, run)
        plan, out, after, note = _fitted(run, counted, Fit(planner, run, counted, budget), note)
    if note and budget is not None and plan is None:
        out = with_note(out, budget_note(layout, decisions, budget, before))
    if plan is None:  # as it came (then every count is known), or with the note
        after = (
            before
            if out is stripped
            else count_forwarded(tokenizer, body, out, known_counts(layout, counted.full))
        )
    # A plan that kept every message as it came (a cut of required parts that found nothing
    # to cut) changes nothing either: the original bytes go.
    changed = layout.tagged or bool(note) or (plan is not None and not _same(out, stripped))
    if plan is None:
        counts: Mapping[Action, int] = Counter(map(_action, decisions.values()))
    elif plan.counts is not None:
        counts = plan.counts
    else:
        counts = Counter(map(_action, plan.decisions.values()))
    forwarded = {**body, "messages": out} if changed else body
    report = partial(_report, run, counted, (plan, decisions, after))
    outcome = make_outcome(run, forwarded, (before, after), counts, layout.problems, report)
    return held_back(outcome, run.held, whole)


def _fitted(run: Run, counted: Counted, fit: Fit, note: bool) -> tuple[Plan, list[Any], int, bool]:
    """The plan that fits (with the budget note when asked for and there is room), the
    forwarded messages, their count, and whether the note is in; Refused when the policy
    rejects a request whose required parts alone are over the budget."""
    assert run.budget is not None
    result = None
    if note:
        try:
            result = fit.run(True)
        except ContextLengthExceeded:
            result = None
        if result is None or result[2] > run.budget:
            result = None
            note = False  # the note is a courtesy: never why a request fails or overflows
            counted.layout.problems.append("no room for the context budget note")
    if result is None:
        try:
            result = fit.run(False)
        except ContextLengthExceeded as exc:  # refused: say by how much (report.refusal)
            why = make_outcome(run, run.body, (counted.before, 0), {}, [], no_report)
            raise Refused(exc.message, why) from None
    return (*result, note)


def _plan_at(
    run: Run,
    body: Body,
    policy: Policy,
    window: int,
    *,
    summaries: Sequence[ExtraSummary] = (),
    recall: bool = True,
) -> PlanOutcome:
    """Cache mode's plans of what it cut (`body`, under `policy` and `window`): the
    ordinary planner, same tokenizer and words and setup, no cache mode (cache/plan_at.py)."""
    words = Kept(run.terms) if run.terms is not None else None  # its words, no plans
    cut = start_run(body, policy, run.tokenizer, window, words, Offered(summaries))
    return _plan(replace(cut, setup=run.setup, recall=recall), False)


_action = operator.attrgetter("action")


# Texts read per step beside a count (a step takes well under a millisecond).
_READ_STEP = 16


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
    run: Run, counted: Counted, made: tuple[Plan | None, dict[int, Decision], int]
) -> PlanReport:
    """The report of a planned request: its plan's decisions, or those made here."""
    plan, decisions, after = made
    if plan is not None:
        decisions = plan.decisions
    allocated = plan.allocated if plan is not None else None
    totals = (run.budget, run.window, counted.before, after)
    return build_report(counted.layout, decisions, run.policy, totals, run.names, allocated)


def _report_as_sent(run: Run, messages: list[Any], tokens: int) -> PlanReport:
    """The report of a request forwarded as it came: every item kept."""
    layout = build_layout(messages, run.policy)
    measure(layout, run.tokenizer)
    reason = "within budget" if run.budget is not None else "no context window known"
    decisions = {k: Decision(Action.KEEP, reason, tokens=c) for k, c in enumerate(layout.cost)}
    totals = (run.budget, run.window, tokens, tokens)
    return build_report(layout, decisions, run.policy, totals, run.names)
