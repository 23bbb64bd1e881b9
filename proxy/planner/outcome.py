"""Outcome: what planning hands the server: the body to forward, counts, a report on demand."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from proxy.planner.items import Action
from proxy.planner.report import PlanReport
from proxy.types import Body

__all__ = ["PlanOutcome", "outcome", "unplanned"]


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

    return outcome(
        body, body, False, (None, context_window), 0, 0, {}, problems, ("unknown", True), report
    )


_TRIMS = (Action.DROP, Action.TRUNCATE, Action.DEDUPE, Action.SUMMARIZE, Action.CLEAR)
_ZEROS = (0,) * len(_TRIMS)


def outcome(
    body: Body,
    forwarded: Body,
    changed: bool,
    totals: tuple[int | None, int | None],
    before: int,
    after: int,
    counts: Mapping[Action, int],
    problems: list[str],
    names: tuple[str, bool],
    report: Callable[[], PlanReport],
) -> PlanOutcome:
    if not counts:  # the common case, a request forwarded as it came: nothing to add up
        return PlanOutcome(
            forwarded, changed, totals[0], totals[1], before, after, 0, 0, 0, 0, 0,
            problems, names[1], report,
        )  # fmt: skip
    trimmed = sum(map(counts.get, _TRIMS, _ZEROS))
    cleared = counts.get(Action.CLEAR, 0)
    return PlanOutcome(
        body=forwarded,
        changed=changed,
        budget=totals[0],
        context_window=totals[1],
        tokens_before=before,
        tokens_after=after,
        dropped=counts.get(Action.DROP, 0),
        truncated=counts.get(Action.TRUNCATE, 0) + cleared,
        summarized=counts.get(Action.SUMMARIZE, 0),
        deduped=counts.get(Action.DEDUPE, 0),
        trimmed=trimmed,
        problems=problems,
        estimated=names[1],
        make_report=report,
        cleared=cleared,
    )
