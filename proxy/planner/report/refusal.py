"""Refusal step: a request over the budget that the policy rejects, with its figures."""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from proxy.errors import ContextLengthExceeded

if TYPE_CHECKING:
    from proxy.planner.report.outcome import PlanOutcome


class Refused(ContextLengthExceeded):
    """400 context_length_exceeded, carrying the outcome that explains it (tokens before,
    budget, window; nothing forwarded), so the answer's headers and the usage row say how
    far over the budget the request was."""

    def __init__(self, message: str, outcome: PlanOutcome) -> None:
        super().__init__(message)
        self.outcome = outcome


def no_report() -> NoReturn:
    """A refused request has no plan to report."""
    raise RuntimeError("a refused request has no plan report")
