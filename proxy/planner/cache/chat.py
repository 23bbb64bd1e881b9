"""Cache mode: an over-budget conversation cut at a stable point, recall after it, then planned.

The history before the stable cut (stable_cut.py) is dropped; what relevance brings back
of it for the current turn goes in one message just before the current turn (history/recall.py),
sized by how clearly the turn points into the cut-off past (chat_recall.py; a large one
takes the newest forwarded turns' room); the rest is forwarded as it came. The shortened
request then goes through the ordinary planner (cache off), which forwards it untouched
when it fits, as it does by design, and otherwise trims what the cut left over the budget:
every request still fits.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from proxy.planner.cache.chat_recall import Cut, recall
from proxy.planner.cache.plan_at import PlanAt
from proxy.planner.cache.report import CacheCut, merged_report
from proxy.planner.cache.stable_cut import history_units, step_of
from proxy.planner.cache.summaries import cut_with_summaries, offered
from proxy.planner.parts import Counted, Run
from proxy.planner.report import PlanOutcome, Refused
from proxy.types import Priority

_LOOP = ("assistant", "tool", "function")  # after the current turn: an agent's exchanges


def plan_stable(run: Run, counted: Counted, plan_at: PlanAt) -> PlanOutcome | None:
    """The outcome for an over-budget request in cache mode; None when it has no history
    to cut (then the ordinary planner decides). `plan_at` plans the shortened request."""
    budget, policy, layout, full = run.budget, run.policy, counted.layout, counted.full
    history = history_units(layout, full)
    if budget is None or run.window is None or not history.units:
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
    room = budget - counted.fixed - other - reserve
    step = step_of(budget, cache.watermark)
    offers, summary_cap = offered(run.summaries, run.tokenizer, policy, budget)
    n, placed = cut_with_summaries(history, room, step, offers, summary_cap, layout.current_start)
    if n == 0:
        return None
    units, cost = history.units, history.cost
    kept = sum(cost[n:]) + sum(p.cost for p in placed)
    # Forwarded history: units n .. end - 1 (a recall may take the newest ones' room).
    cut = Cut(history, n, len(units), kept, staying, other)
    recalled: list[int] = []
    extra: dict[str, str] | None = None
    # In an agent's loop (exchanges after the current turn) the recall would sit before
    # every step's exchanges and change as they grow, so that none of them were cached:
    # it is made for a chat turn only (agent runs at 16k: 68% -> 78% of trimmed prompt
    # tokens cached; with the old fixed share 76%).
    looping = any(r in _LOOP for r in layout.roles[layout.current_start :])
    if cap > 0 and not looping:
        found = recall(run, counted, cut, cap)
        if found is not None:
            extra, chosen = found
            recalled = [units[u][0] for u in chosen]
    gone = {i for unit in (*units[:n], *units[cut.end :]) for i in unit}
    boundary = units[n][0] if n < len(units) else layout.current_start
    report = CacheCut(sorted(gone), set(recalled), [], history.tokens - cut.kept, step)
    reduced: list[Any] = []
    for i, m in enumerate(run.body["messages"]):
        if i == boundary:  # summaries where what they cover was: at the cut
            for p in placed:
                report.inserted[len(reduced)] = (i, p.summary)
                reduced.append(p.message)
                report.origin.append(None)
        if extra is not None and i == layout.current_start:
            reduced.append(extra)
            report.origin.append(None)
        if i not in gone:
            reduced.append(m)
            report.origin.append(i)
    for p in placed:
        report.summarized.update(i for i in range(p.summary.start, p.summary.end) if i in gone)
    try:
        result = plan_at({**run.body, "messages": reduced}, policy, run.window)
    except Refused as exc:  # the required parts alone are over: say it of the whole request
        exc.outcome.tokens_before = counted.before
        raise
    summarized = len(report.summarized)
    # The inner outcome with the whole request's figures: its other counts stand as they are.
    return replace(
        result,
        changed=True,
        tokens_before=counted.before,
        dropped=len(gone) - summarized + result.dropped,
        summarized=summarized + result.summarized,
        trimmed=len(gone) + result.trimmed,
        problems=list(dict.fromkeys([*layout.problems, *result.problems])),  # planned twice
        make_report=merged_report(result, layout, report, counted.before),
    )
