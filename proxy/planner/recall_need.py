"""Recall need: how much of what relevance would pick for the current turn a stable cut dropped.

Most turns of a conversation carry on from its newest part and need little of its cut-off
past; a question about the past needs a lot. The need is measured against the per-request
choice: take the history units relevance ranks first, as many as the history's room holds
(what cache mode off would keep), and weigh each by its score; the need is the cut-off
units' share of that weight: 0 when all of it is still forwarded, 1 when all was cut off.
Measured on LoCoMo (bench_cache.py) it tells the questions asked at the end from the
replayed turns far better than the share of the turn's terms found only in the cut-off
part (AUC 0.78 against 0.60-0.71), so the recall's tokens (never cached) go to the
requests that need them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def recall_need(
    scores: Sequence[float], cut: Sequence[bool], cost: Sequence[int], room: int
) -> float:
    """The need (0-1): the score-weighted share of cut-off units (`cut`) among the best
    scored units whose `cost` fits `room` (ties: the newer first, as the planner ranks)."""
    ranked = sorted((u for u, s in enumerate(scores) if s > 0.0), key=lambda u: (-scores[u], -u))
    used = 0
    gone = total = 0.0
    for u in ranked:
        used += cost[u]
        if used > room:
            break
        total += scores[u]
        if cut[u]:
            gone += scores[u]
    return gone / total if total > 0.0 else 0.0


def recall_size(need: float, floor: float, full: float, cap: int) -> int:
    """Tokens for the recall message: none at or below the need `floor`, rising linearly
    above it to `cap` at the need `full` and past it."""
    if need <= floor:
        return 0
    if need >= full or full <= floor:
        return cap
    return math.floor(cap * (need - floor) / (full - floor))
