"""Cache mode: an over-budget conversation cut at a stable point, recall after it, then planned.

The history before the stable cut (stable_cut.py) is dropped; what relevance brings back
of it for the current turn goes in one message just before the current turn (recall.py),
sized by how clearly the turn points into the cut-off past (recall_need.py; a large one takes the
newest forwarded turns' room); the rest is forwarded as it came. The shortened request
then goes through the ordinary planner (cache off), which forwards it untouched when it
fits, as it does by design, and otherwise trims what the cut left over the budget: every
request still fits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from proxy.planner.cache_report import CacheCut, merged_report
from proxy.planner.cache_summaries import cut_with_summaries, offered
from proxy.planner.extra_summaries import ExtraSummary
from proxy.planner.history import query_texts
from proxy.planner.items import Layout
from proxy.planner.outcome import PlanOutcome
from proxy.planner.recall import recall_message, speaker_line
from proxy.planner.recall_need import (
    STATEMENT_WEIGHT,
    asks,
    carrying_on,
    recall_need,
    recall_size,
    without_own_label,
)
from proxy.planner.refusal import Refused
from proxy.planner.stable_cut import history_units, step_of
from proxy.policy import Policy
from proxy.relevance import TermIndex, score_history
from proxy.types import Body, Priority, Tokenizer

_LOOP = ("assistant", "tool", "function")  # after the current turn: an agent's exchanges
# The shortest prefix a provider caches, and one step more: OpenAI caches from 1,024 tokens
# in 128-token steps (Anthropic's minimum is 1,024 or 2,048 by model).
CACHEABLE_PREFIX = 1024 + 128


def plan_stable(
    body: Body,
    policy: Policy,
    tokenizer: Tokenizer,
    layout: Layout,
    full: Sequence[int],
    totals: tuple[int, int, int],
    terms: TermIndex | None,
    inner: Callable[[Body], PlanOutcome],
    extra_summaries: Sequence[ExtraSummary] = (),
) -> PlanOutcome | None:
    """The outcome for an over-budget `body` in cache mode; None when it has no history
    to cut (then the ordinary planner decides). `totals`: budget, fixed overhead, tokens
    before; `inner` plans a body with cache mode off."""
    budget, fixed, before = totals
    history = history_units(layout, full)
    if not history.units:
        return None
    in_history = {i for unit in history.units for i in unit}
    # What stays beside the history: messages with a required part. Optional tagged parts
    # outside it (client summaries, memory blocks) get no room here: the ordinary planner
    # below gives them what the turns leave, as it does without cache mode (LoCoMo with one
    # client summary per session at 2k: recall 0.24 when their room came first, 0.74
    # without summaries).
    priority, required = layout.priority, Priority.REQUIRED
    staying = [
        i
        for i in range(len(full))
        if i not in in_history and any(priority[k] is required for k in layout.items_of(i))
    ]
    other = sum(full[i] for i in staying)
    recall_on = policy.history.relevance == "bm25"
    cache = policy.cache
    cap = math.floor(cache.recall_share * budget) if recall_on else 0
    reserve = min(cap, math.floor(cache.recall_reserve * budget))
    room = budget - fixed - other - reserve
    step = step_of(budget, cache.watermark)
    offers, summary_cap = offered(extra_summaries, tokenizer, policy, budget)
    n, placed = cut_with_summaries(history, room, step, offers, summary_cap, layout.current_start)
    if n == 0:
        return None
    units, cost = history.units, history.cost
    end = len(units)  # forwarded history: units n .. end - 1
    kept_cost = sum(cost[n:]) + sum(p.cost for p in placed)
    recalled: list[int] = []
    extra: dict[str, str] | None = None
    # In an agent's loop (exchanges after the current turn) the recall would sit before
    # every step's exchanges and change as they grow, so that none of them were cached:
    # it is made for a chat turn only (agent runs at 16k: 68% -> 78% of trimmed prompt
    # tokens cached; with the old fixed share 76%).
    looping = any(r in _LOOP for r in layout.roles[layout.current_start :])
    if cap > 0 and not looping:
        text, base = layout.text, layout.base
        texts = [
            text[base[u[0]]] if len(u) == 1 else " ".join(text[base[i]] for i in u) for u in units
        ]
        query, context = query_texts(layout)
        query = without_own_label(query)
        scores = score_history(query, texts, context=context, index=terms) if query.strip() else []
        flags = [u < n for u in range(len(units))]
        # Less for a statement, and for a reply to the message just before the turn (what
        # it is about is in view): LoCoMo at 4k, at recall 0.850, 84.6% of trimmed prompt
        # tokens cached with the second weight, 79.5% without it.
        need = recall_need(scores, flags) * (1.0 if asks(query) else STATEMENT_WEIGHT)
        need *= 1.0 - carrying_on(scores)
        want = recall_size(need, cache.recall_floor, cache.recall_full, cap)
        free = budget - fixed - other - kept_cost
        # A recall larger than the room the cut left takes the newest forwarded turns'
        # room: the prefix before them is the one the last request sent (still cached).
        # A partial one (the turn points into the past, but not clearly) stops short of
        # taking that prefix below what the provider caches at all: it would cost this
        # request's cache and the next one's for a recall that is most often not needed
        # (LoCoMo at 4k: 83.4% of trimmed prompt tokens cached at recall 0.854; without
        # this, 83.1% at 0.855).
        prefix = sum(full[i] for i in staying if i < layout.current_start) + kept_cost
        keep = CACHEABLE_PREFIX if want < cap else 0
        while free < want and end > n:
            if prefix - cost[end - 1] < keep <= prefix:
                break  # one turn more would take the prefix below what is cached at all
            end -= 1
            free += cost[end]
            kept_cost -= cost[end]
            prefix -= cost[end]

        def line_of(u: int) -> str | None:
            return speaker_line(layout.stripped[units[u][0]]) if len(units[u]) == 1 else None

        room_r = min(want, free)
        candidates = [*range(n), *range(end, len(units))]
        found = None
        if room_r > 0:
            found = recall_message(line_of, candidates, scores, room_r, tokenizer)
        if found is not None:
            extra, chosen = found
            recalled = [units[u][0] for u in chosen]
    gone = {i for unit in (*units[:n], *units[end:]) for i in unit}
    boundary = history.units[n][0] if n < len(history.units) else layout.current_start
    cut = CacheCut(sorted(gone), set(recalled), [], history.tokens - kept_cost, step)
    reduced: list[Any] = []
    for i, m in enumerate(body["messages"]):
        if i == boundary:  # summaries where what they cover was: at the cut
            for p in placed:
                cut.inserted[len(reduced)] = (i, p.summary)
                reduced.append(p.message)
                cut.origin.append(None)
        if extra is not None and i == layout.current_start:
            reduced.append(extra)
            cut.origin.append(None)
        if i not in gone:
            reduced.append(m)
            cut.origin.append(i)
    for p in placed:
        cut.summarized.update(i for i in range(p.summary.start, p.summary.end) if i in gone)
    try:
        result = inner({**body, "messages": reduced})
    except Refused as exc:  # the required parts alone are over: say it of the whole request
        why = exc.outcome
        why.tokens_before = before
        raise
    summarized = len(cut.summarized)
    # The inner outcome with the whole request's figures: its other counts stand as they are.
    return replace(
        result,
        changed=True,
        tokens_before=before,
        dropped=len(gone) - summarized + result.dropped,
        summarized=summarized + result.summarized,
        trimmed=len(gone) + result.trimmed,
        problems=list(dict.fromkeys([*layout.problems, *result.problems])),  # planned twice
        make_report=merged_report(result, layout, cut, before),
    )
