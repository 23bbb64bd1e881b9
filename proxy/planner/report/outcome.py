"""Outcome: what planning hands the server: the body to forward, counts, a report on demand."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from proxy.planner.parts import Action, Run
from proxy.planner.report.plan_report import PlanReport
from proxy.types import Body

__all__ = ["PlanOutcome", "held_back", "make_outcome", "unplanned"]


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
    # Old tool results cleared (placeholder in place of the content); also counted in
    # `truncated`, the usage row's counter for content cut but kept.
    cleared: int = 0
    # Tokens of the budget left for what the caller adds to a trimmed request (Offered).
    held: int = 0
    _report: PlanReport | None = field(default=None, init=False, repr=False)

    @property
    def report(self) -> PlanReport:
        """Built on first use: the proxy's hot path needs only the counts above."""
        if self._report is None:
            self._report = self.make_report()
        return self._report


def unplanned(body: Body, context_window: int | None, error: str) -> PlanOutcome:
    """The outcome of a request forwarded as it came because planning it failed (a bug in
    the proxy): no budget, no counts, nothing trimmed, and the failure as the one problem."""
    problems = [f"planning failed ({error}); forwarded as it came"]

    def report() -> PlanReport:
        raise RuntimeError(problems[0])

    return PlanOutcome(
        body, False, None, context_window, 0, 0, 0, 0, 0, 0, 0, problems, True, report
    )


# Compacted results count as trimmed (their bytes changed), not as truncated: nothing is cut.
_TRIMS = (
    Action.DROP,
    Action.TRUNCATE,
    Action.DEDUPE,
    Action.SUMMARIZE,
    Action.CLEAR,
    Action.COMPACT,
)
_ZEROS = (0,) * len(_TRIMS)


def make_outcome(
    run: Run,
    forwarded: Body,
    tokens: tuple[int, int],
    counts: Mapping[Action, int],
    problems: list[str],
    report: Callable[[], PlanReport],
) -> PlanOutcome:
    """What planning `run` hands the server: `forwarded` (the request's own body when it
    goes as it came), its `tokens` before and after, what was done by action."""
    changed = forwarded is not run.body
    before, after = tokens
    budget, window, estimated = run.budget, run.window, run.tokenizer.estimated
    if not counts:  # the common case, a request forwarded as it came: nothing to add up
        return PlanOutcome(
            forwarded, changed, budget, window, before, after, 0, 0, 0, 0, 0,
            problems, estimated, report,
        )  # fmt: skip
    trimmed = sum(map(counts.get, _TRIMS, _ZEROS))
    cleared = counts.get(Action.CLEAR, 0)
    return PlanOutcome(
        body=forwarded,
        changed=changed,
        budget=budget,
        context_window=window,
        tokens_before=before,
        tokens_after=after,
        dropped=counts.get(Action.DROP, 0),
        truncated=counts.get(Action.TRUNCATE, 0) + cleared,
        summarized=counts.get(Action.SUMMARIZE, 0),
        deduped=counts.get(Action.DEDUPE, 0),
        trimmed=trimmed,
        problems=problems,
        estimated=estimated,
        make_report=report,
        cleared=cleared,
    )


def held_back(outcome: PlanOutcome, held: int, whole: int | None) -> PlanOutcome:
    """`outcome` of a plan that left `held` tokens of its budget for what the caller adds
    to a request it trimmed (Offered.reserve): the request's `whole` budget said, in the
    outcome and its report (a cache-mode plan reports the budget it planned the head with,
    not the one it was given); and when the plan left anything out (then the caller adds
    it), `held` set and counted in what is forwarded."""
    if not held:
        return outcome
    adds = held if (outcome.dropped or outcome.truncated or outcome.summarized) else 0
    made = outcome.make_report

    def report() -> PlanReport:
        inner = made()
        if inner.budget is not None:
            inner.budget = whole
        inner.tokens_after += adds
        return inner

    budget = whole if outcome.budget is not None else None
    after = outcome.tokens_after + adds
    return replace(outcome, budget=budget, tokens_after=after, held=adds, make_report=report)
