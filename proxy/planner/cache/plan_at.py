"""How cache mode plans what it cut: the ordinary planner, given a body, a policy, a window."""

from __future__ import annotations

from collections.abc import Callable

from proxy.planner.report import PlanOutcome
from proxy.policy import Policy
from proxy.types import Body

# Plans a body under a policy and a context window: the same tokenizer and words as the
# request being planned, no summaries, cache mode off.
PlanAt = Callable[[Body, Policy, int], PlanOutcome]
