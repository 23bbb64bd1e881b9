"""Cache mode: an over-budget conversation cut at a stable point, recall after it, then planned.

The history before the stable cut (stable_cut.py) is dropped; what relevance brings back
of it for the current turn goes in one message just before the current turn (recall.py);
the rest is forwarded as it came. The shortened request then goes through the ordinary
planner (cache off), which forwards it untouched when it fits, as it does by design, and
otherwise trims what the cut left over the budget: every request still fits.
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
from proxy.planner.refusal import Refused
from proxy.planner.stable_cut import history_units, step_of
from proxy.policy import Policy
from proxy.relevance import TermIndex
from proxy.types import Body, Tokenizer


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
    other = sum(c for i, c in enumerate(full) if i not in in_history)
    recall_on = policy.history.relevance == "bm25"
    cap = math.floor(policy.cache.recall_share * budget) if recall_on else 0
    room = budget - fixed - other - cap
    step = step_of(budget, policy.cache.watermark)
    offers, summary_cap = offered(extra_summaries, tokenizer, policy, budget)
    n, placed = cut_with_summaries(history, room, step, offers, summary_cap, layout.current_start)
    if n == 0:
        return None
    kept_cost = sum(history.cost[n:]) + sum(p.cost for p in placed)
    recall_room = min(cap, budget - fixed - other - kept_cost)
    recalled: list[int] = []
    extra: dict[str, str] | None = None
    if recall_room > 0:
        text, base, units = layout.text, layout.base, history.units
        texts = [
            text[base[u[0]]] if len(u) == 1 else " ".join(text[base[i]] for i in u) for u in units
        ]

        def line_of(u: int) -> str | None:
            return speaker_line(layout.stripped[units[u][0]]) if len(units[u]) == 1 else None

        query, context = query_texts(layout)
        found = recall_message(texts, line_of, n, query, context, recall_room, tokenizer, terms)
        if found is not None:
            extra, chosen = found
            recalled = [history.units[u][0] for u in chosen]
    gone = {i for unit in history.units[:n] for i in unit}
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
