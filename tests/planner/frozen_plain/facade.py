"""Frozen copy of the lean branch of proxy/planner/request.py (commit 70383c6), tests only."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.planner.parts.costs import measure, overhead
from proxy.planner.parts.run import Run, compute_budget, max_output
from proxy.planner.parts.sections import build_layout
from proxy.planner.parts.summaries import ExtraSummary
from proxy.planner.report.outcome import PlanOutcome, make_outcome
from proxy.planner.report.plan_report import PlanReport, build_report
from proxy.policy import Policy
from proxy.relevance import TermIndex
from proxy.types import Body, Tokenizer
from tests.planner.frozen_plain.chat import untagged_counts
from tests.planner.frozen_plain.plan import plan_plain


def plan_lean(
    body: Body,
    policy: Policy,
    tokenizer: Tokenizer,
    context_window: int | None,
    extra_summaries: Sequence[ExtraSummary] = (),
    terms: TermIndex | None = None,
) -> PlanOutcome | None:
    """The old lean path's outcome for `body`, or None where it left the request to the
    general path (tags, odd shapes, a report in the prompt, within budget, and the cases
    plan_plain declines)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or policy.visibility.prompt_report:
        return None
    budget = compute_budget(
        context_window, policy.budget.ratio, policy.budget.reserve_output, max_output(body)
    )
    if policy.history.relevance == "bm25" and terms is None:
        terms = TermIndex()
    known = untagged_counts(messages, tokenizer)
    if known is None or budget is None:
        return None
    counted = sum(known)
    before = counted + overhead(tokenizer, body, messages)
    if before <= budget:
        return None
    lean = plan_plain(
        body, messages, policy, tokenizer, budget, before - counted, known, extra_summaries, terms
    )
    if lean is None:
        return None
    totals = (budget, context_window)
    names = (tokenizer.name, tokenizer.estimated)

    def report() -> PlanReport:
        layout = build_layout(messages, policy, checked=True)
        measure(layout, tokenizer, known)
        layout.problems += lean.problems
        decisions = dict(enumerate(lean.decisions()))
        counts = (*totals, before, lean.after)
        return build_report(layout, decisions, policy, counts, names, lean.allocated)

    forwarded = {**body, "messages": lean.out}
    counts = lean.counts
    run = Run(body, policy, tokenizer, context_window, budget, terms, extra_summaries)
    return make_outcome(run, forwarded, (before, lean.after), counts, lean.problems, report)
