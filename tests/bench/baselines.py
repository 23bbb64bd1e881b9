"""Benchmark baselines: the trimming rules other tools use, over per-message token costs.

Each function takes the cost of every history message (oldest first, system prompt and
current turn excluded), the tokens already spent on what is always kept, and the budget;
it returns the indices of the history messages it keeps.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.relevance.scoring import expand_neighbors, score_history


def keep_newest(costs: Sequence[int], fixed: int, budget: int) -> list[int]:
    """litellm's trim_messages / LangChain's trim_messages(strategy='last'): newest first,
    whole messages, stop at the first one that does not fit."""
    room = budget - fixed
    kept: list[int] = []
    for i in range(len(costs) - 1, -1, -1):
        if costs[i] > room:
            break
        room -= costs[i]
        kept.append(i)
    return sorted(kept)


def middle_out(costs: Sequence[int], fixed: int, budget: int) -> list[int]:
    """OpenRouter's middle-out: remove messages from the middle until the rest fits."""
    kept = list(range(len(costs)))
    total = fixed + sum(costs)
    while kept and total > budget:
        total -= costs[kept.pop(len(kept) // 2)]
    return kept


def relevance_fill(
    costs: Sequence[int],
    fixed: int,
    budget: int,
    texts: Sequence[str],
    query: str,
    keep_recent: int = 6,
    neighbors: int = 0,
) -> list[int]:
    """A reference for the planner's relevance mode, from relevance.py alone: the newest
    `keep_recent` messages, then older ones by BM25 score (ties: newer first), each with
    `neighbors` messages on either side, skipping what does not fit."""
    n = len(costs)
    room = budget - fixed
    kept: set[int] = set()
    for i in range(n - 1, max(n - keep_recent, 0) - 1, -1):
        if costs[i] > room:
            break
        room -= costs[i]
        kept.add(i)
    older = max(n - keep_recent, 0)
    scores = score_history(query, texts[:older])
    for i in sorted(range(older), key=lambda j: (-scores[j], -j)):
        if scores[i] <= 0.0:
            break
        group = sorted(expand_neighbors({i}, neighbors, older) - kept)
        cost = sum(costs[j] for j in group)
        if cost <= room:
            room -= cost
            kept.update(group)
        elif costs[i] <= room and i not in kept:
            room -= costs[i]
            kept.add(i)
    return sorted(kept)
