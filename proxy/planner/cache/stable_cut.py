"""Steps: how far cache mode's cuts move at a time, and where a step boundary falls.

A function of the request and the policy alone (no memory of earlier turns): a request is
planned as it stood at the first unit (or turn) that starts at or after k * step tokens
from its start, k the whole steps in it. That only moves when the request has grown by a
whole step: the requests between two boundaries append to an unchanged forwarded prefix,
which the provider's prompt cache serves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def step_of(budget: int, watermark: float) -> int:
    """Tokens the boundary moves by: (1 - watermark) of the budget, at least 1."""
    return max(1, math.floor((1.0 - watermark) * budget))


def boundary(full: Sequence[int], starts: Sequence[int], step: int, later: int = 0) -> int:
    """The index of the first of `starts` (where a unit or a turn begins) at or after
    k * step tokens from the start, k = the whole steps in the messages (and `later` more);
    len(full) when none (the newest unit ends there)."""
    mark = (sum(full) // step + later) * step
    begins = set(starts)
    seen = 0
    for i, cost in enumerate(full):
        if seen >= mark and i in begins:
            return i
        seen += cost
    return len(full)
