"""How cache mode plans what it cut: the ordinary planner, given a body, a policy, a window."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from proxy.planner.parts import ExtraSummary
from proxy.planner.report import PlanOutcome
from proxy.policy import Policy
from proxy.types import Body


class PlanAt(Protocol):
    """Plans a body under a policy and a context window: the same tokenizer and words as
    the request being planned, cache mode off; with the proxy's `summaries` on offer, and
    without a recall of omitted turns when `recall` is off (a plan of a conversation's
    earlier part: what its newest question needs is not the request's)."""

    def __call__(
        self,
        body: Body,
        policy: Policy,
        window: int,
        *,
        summaries: Sequence[ExtraSummary] = (),
        recall: bool = True,
    ) -> PlanOutcome: ...
