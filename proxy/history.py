"""History order: which older turns to keep first — by relevance to the current turn, or recency."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.items import Item
from proxy.relevance import TermIndex, score_history
from proxy.types import Priority, Section


def query_texts(items: Sequence[Item]) -> tuple[str, str]:
    """What relevance is to: the current turn's user text, and the newest turns' text."""
    current = "\n".join(it.text for it in items if it.current and it.role == "user")
    recent = "\n".join(
        it.text
        for it in items
        if it.section is Section.RECENT_MESSAGES and it.priority is Priority.HIGH
    )
    return current, recent


def keep_order(
    texts: Sequence[str],
    positions: Sequence[int],
    query: str | None,
    context: str = "",
    neighbors: int = 0,
    index: TermIndex | None = None,
) -> list[int]:
    """The rank of each older-history choice in its keep order (0 is kept first).

    With a `query` (the current turn; `context`, the newest turns, weighs less): the
    highest BM25 score first (ties: the newer first), each followed by up to `neighbors`
    turns on either side of it; turns that share nothing with the query follow, newest
    first. Without a query (relevance off): newest first.
    """
    n = len(texts)
    newest_first = sorted(range(n), key=lambda i: -positions[i])
    if query is None or n == 0:
        sequence = newest_first
    else:
        scores = score_history(query, texts, context=context, index=index)
        by_position = sorted(range(n), key=lambda i: positions[i])
        slot = {c: k for k, c in enumerate(by_position)}
        seen: set[int] = set()
        sequence = []
        for c in sorted(range(n), key=lambda i: (-scores[i], -positions[i])):
            if scores[c] <= 0.0:
                break
            around = [c]
            for step in range(1, neighbors + 1):
                around += [by_position[k] for k in (slot[c] - step, slot[c] + step) if 0 <= k < n]
            for member in around:
                if member not in seen:
                    seen.add(member)
                    sequence.append(member)
        sequence += [c for c in newest_first if c not in seen]
    rank = [0] * n
    for k, c in enumerate(sequence):
        rank[c] = k
    return rank
