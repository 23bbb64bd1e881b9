"""History order: which older turns to keep first — by relevance to the current turn, or recency."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from itertools import compress, repeat

from proxy.planner.parts import Kind, Layout, command_text
from proxy.relevance import TermIndex, score_history
from proxy.types import Priority, Section


def agent_query(layout: Layout) -> tuple[str, str] | None:
    """What an agent is doing now: its reasoning and commands in the current turn's tool
    exchanges (the query), and the results and the last user message (the context); None
    when the current turn holds no tool call (then relevance is to the user's words)."""
    units, unit_of, stripped = layout.units, layout.unit_of, layout.stripped
    now = [
        i
        for i in range(layout.current_start, len(stripped))
        if layout.in_current(i) and len(units[unit_of[i]]) > 1
    ]
    if not now:
        return None
    text = layout.text
    query: list[str] = []
    asked = [text[layout.base[i]] for i in range(layout.current_start, len(stripped))
             if layout.roles[i] == "user"]  # fmt: skip
    # A long agent loop: the task's words say little about which result matters now; a
    # tool call inside a chat turn: the question is still the user's.
    context = asked if layout.agent else []
    if not layout.agent:
        query += asked
    # The query: the agent's newest commands, whose paths and identifiers its next one
    # most often repeats (command_keys.py); its reasoning and the newest results weigh as
    # context. With the reasoning in the query, 0.37 of that evidence is kept, not 0.45.
    for i in now:
        own = text[layout.base[i]]
        if layout.roles[i] == "assistant":
            query.append(command_text(layout, i))
        context.append(own)
    return "\n".join(query), "\n".join(context)


def query_texts(layout: Layout) -> tuple[str, str]:
    """What relevance is to: the current turn's user text, and the newest turns' text (in an
    agent loop: its newest reasoning and commands, and the newest results)."""
    if layout.agent:  # an agent loop with history of its own
        found = agent_query(layout)
        if found is not None:
            return found
    start, msg, role, text = layout.current_start, layout.msg, layout.role, layout.text
    kind, summary = layout.kind, Kind.SUMMARY
    if not layout.split and not layout.extra:  # item k is message k: the current turn's
        current = [t for t, r in zip(text[start:], role[start:], strict=True) if r == "user"]
    else:
        current = [
            text[k]
            for k in range(len(msg))
            if msg[k] >= start and role[k] == "user" and kind[k] is not summary
        ]
    section, high = Section.RECENT_MESSAGES, Priority.HIGH
    recent = compress(  # whole-list passes: this runs per request
        text,
        map(
            operator.and_,
            map(operator.is_, layout.section, repeat(section)),
            map(operator.is_, layout.priority, repeat(high)),
        ),
    )
    return "\n".join(current), "\n".join(recent)


def keep_order(
    texts: Sequence[str],
    positions: Sequence[int],
    query: str | None,
    context: str = "",
    neighbors: int = 0,
    index: TermIndex | None = None,
) -> list[int]:
    """The rank of each older-history choice in its keep order (0 is kept first): the
    inverse of `keep_sequence`."""
    rank = [0] * len(texts)
    for k, c in enumerate(keep_sequence(texts, positions, query, context, neighbors, index)):
        rank[c] = k
    return rank


def keep_sequence(
    texts: Sequence[str],
    positions: Sequence[int],
    query: str | None,
    context: str = "",
    neighbors: int = 0,
    index: TermIndex | None = None,
) -> list[int]:
    """The older-history choices (indexes into `texts`) in the order they are kept.

    With a `query` (the current turn; `context`, the newest turns, weighs less): the
    highest BM25 score first (ties: the newer first), each followed by up to `neighbors`
    turns on either side of it; turns that share nothing with the query follow, newest
    first. Without a query (relevance off): newest first.
    """
    n = len(texts)
    if all(map(operator.lt, positions, positions[1:])):
        newest_first = list(range(n - 1, -1, -1))  # the usual case: given oldest first
    else:  # sorts are stable, also with reverse=True: equal positions keep their order
        newest_first = sorted(range(n), key=positions.__getitem__, reverse=True)
    if query is None or n == 0:
        return newest_first
    scores = score_history(query, texts, context=context, index=index)
    # Only the turns that share something with the query are ranked by score.
    scored = [i for i in newest_first if scores[i] > 0.0]
    scored.sort(key=scores.__getitem__, reverse=True)  # ties: newer first, as listed
    if not neighbors:
        seen = set(scored)
        return scored + [c for c in newest_first if c not in seen] if seen else newest_first
    by_position = newest_first[::-1]
    if len(set(positions)) != n:  # ties: ascending order, given order kept
        by_position = sorted(range(n), key=positions.__getitem__)
    slot = [0] * n
    for k, c in enumerate(by_position):
        slot[c] = k
    taken = [False] * n
    sequence: list[int] = []
    for c in scored:  # each followed by its neighbours, nearest first, the older first
        k = slot[c]
        if not taken[c]:
            taken[c] = True
            sequence.append(c)
        for step in range(1, neighbors + 1):
            for j in (k - step, k + step):
                if 0 <= j < n and not taken[member := by_position[j]]:
                    taken[member] = True
                    sequence.append(member)
    if not sequence:
        return newest_first
    return sequence + [c for c in newest_first if not taken[c]]
