"""History order: which older turns to keep first — by relevance to the current turn, or recency."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.items import Item
from proxy.relevance import TermIndex, score_history
from proxy.types import Priority, Section


def query_texts(items: Sequence[Item]) -> tuple[str, str]:
    """What relevance is to: the current turn's user text, and the newest turns' text."""
    current: list[str] = []
    recent: list[str] = []
    section, high = Section.RECENT_MESSAGES, Priority.HIGH
    for it in items:  # one pass: this runs per item
        if it.current and it.role == "user":
            current.append(it.text)
        if it.section is section and it.priority is high:
            recent.append(it.text)
    return "\n".join(current), "\n".join(recent)


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
    # Sorts are stable, also with reverse=True: equal positions keep their given order.
    newest_first = sorted(range(n), key=positions.__getitem__, reverse=True)
    if query is None or n == 0:
        sequence = newest_first
    else:
        scores = score_history(query, texts, context=context, index=index)
        by_position = newest_first[::-1] if neighbors else []
        if neighbors and len(set(positions)) != n:  # ties: ascending order, given order kept
            by_position = sorted(range(n), key=positions.__getitem__)
        slot = {c: k for k, c in enumerate(by_position)}
        seen: set[int] = set()
        sequence = []
        # Only the turns that share something with the query are ranked by score.
        scored = [i for i in newest_first if scores[i] > 0.0]
        scored.sort(key=scores.__getitem__, reverse=True)  # ties: newer first, as listed
        for c in scored:
            if not neighbors:
                seen.add(c)
                sequence.append(c)
                continue
            around = [c]
            for step in range(1, neighbors + 1):
                around += [by_position[k] for k in (slot[c] - step, slot[c] + step) if 0 <= k < n]
            for member in around:
                if member not in seen:
                    seen.add(member)
                    sequence.append(member)
        sequence += [c for c in newest_first if c not in seen] if seen else newest_first
    rank = [0] * n
    for k, c in enumerate(sequence):
        rank[c] = k
    return rank
