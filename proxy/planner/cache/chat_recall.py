"""Cache mode's recall for a chat turn: how much room it gets, and which cut-off turns fill it.

The room follows how clearly the current turn points into the cut-off past (history/standout.py):
none for a turn that carries on from the newest messages, the full share for a clear
question about something long ago. A recall larger than the room the cut left takes the
newest forwarded turns' room: the prefix before them is the one the last request sent.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.planner.cache.stable_cut import History
from proxy.planner.history import (
    STATEMENT_WEIGHT,
    asks,
    carrying_on,
    exchange_lines,
    now_of,
    query_texts,
    recall_message,
    recall_need,
    recall_size,
    speaker_line,
    without_own_label,
    worth,
)
from proxy.planner.parts import Counted, Run, tool_name
from proxy.relevance import score_history

# The shortest prefix a provider caches, and one step more: OpenAI caches from 1,024 tokens
# in 128-token steps (Anthropic's minimum is 1,024 or 2,048 by model).
CACHEABLE_PREFIX = 1024 + 128


@dataclass(slots=True)
class Cut:
    """Where the stable cut fell: history units [0, n) dropped, [n, end) forwarded as they
    came (`end` moves down when a recall takes the newest turns' room)."""

    history: History
    n: int
    end: int
    kept: int  # tokens of the history forwarded, with the summaries placed at the cut
    staying: list[int]  # messages outside the history that are forwarded (required parts)
    other: int  # their tokens


def recall(
    run: Run, counted: Counted, cut: Cut, cap: int
) -> tuple[dict[str, str], list[int]] | None:
    """The recall message for the current turn, at most `cap` tokens, and the history
    units it holds; None when the turn needs none or nothing relevant fits. May move
    `cut.end` down (the newest forwarded turns give their room to a large recall)."""
    layout, full, budget = counted.layout, counted.full, run.budget
    assert budget is not None  # cache mode plans only requests with a budget
    cache = run.policy.cache
    units, cost, n = cut.history.units, cut.history.cost, cut.n
    text, base = layout.text, layout.base
    texts = [text[base[u[0]]] if len(u) == 1 else " ".join(text[base[i]] for i in u) for u in units]
    query, context = query_texts(layout)
    query = without_own_label(query)
    terms = run.terms
    scores = score_history(query, texts, context=context, index=terms) if query.strip() else []
    flags = [u < n for u in range(len(units))]
    # Less for a statement, and for a reply to the message just before the turn (what
    # it is about is in view): LoCoMo at 4k, at recall 0.850, 84.6% of trimmed prompt
    # tokens cached with the second weight, 79.5% without it.
    need = recall_need(scores, flags) * (1.0 if asks(query) else STATEMENT_WEIGHT)
    need *= 1.0 - carrying_on(scores)
    want = recall_size(need, cache.recall_floor, cache.recall_full, cap)
    free = budget - counted.fixed - cut.other - cut.kept
    # A recall larger than the room the cut left takes the newest forwarded turns'
    # room: the prefix before them is the one the last request sent (still cached).
    # A partial one (the turn points into the past, but not clearly) stops short of
    # taking that prefix below what the provider caches at all: it would cost this
    # request's cache and the next one's for a recall that is most often not needed
    # (LoCoMo at 4k: 83.4% of trimmed prompt tokens cached at recall 0.854; without
    # this, 83.1% at 0.855).
    prefix = sum(full[i] for i in cut.staying if i < layout.current_start) + cut.kept
    keep = CACHEABLE_PREFIX if want < cap else 0
    end, kept = cut.end, cut.kept
    while free < want and cut.end > n:
        if prefix - cost[cut.end - 1] < keep <= prefix:
            break  # one turn more would take the prefix below what is cached at all
        cut.end -= 1
        free += cost[cut.end]
        cut.kept -= cost[cut.end]
        prefix -= cost[cut.end]

    def line_of(u: int) -> str | None:
        unit = [layout.stripped[i] for i in units[u]]
        if len(unit) == 1:
            return speaker_line(unit[0])
        return exchange_lines(unit, lambda result: tool_name(result, unit[0]))

    room = min(want, free)
    candidates = [*range(n), *range(cut.end, len(units))]
    found = None
    if room > 0 and scores:
        # Which turns fill it: the same worth as the per-request plan ranks history by
        # (history/rank.py), from the scores above: evidence per square root of a token.
        values = worth(texts, cost, [0] * len(texts), now_of(layout), terms, scores)
        found = recall_message(line_of, candidates, values, room, run.tokenizer)
    if found is None:  # nothing to recall: the newest turns keep their room
        cut.end, cut.kept = end, kept
    return found
