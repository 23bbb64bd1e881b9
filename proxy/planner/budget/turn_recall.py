"""Turn recall: what the current turn needs of the turns a plan left out, quoted in one
message just before it.

A turn is kept whole or not at all (its reply at least as a placeholder): that costs the
turn's question, its placeholder and the marker of the stretch around it, where what the
current question needs may be one line of it. So a share of the room is kept for a recall:
the parts of the omitted turns (a question, a reply) worth the most now, each quoted with
its speaker (history/recall.py), in the conversation's order. Recalled text gains no
privilege: a user message, quoted, never a system or developer one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from proxy.planner.budget.grants import Choices
from proxy.planner.budget.state import PlanState
from proxy.planner.history import per_token, recall_message, speaker_line
from proxy.planner.parts import Action, Decision

# The share of the room the required parts and the newest turns leave that a conversation
# keeps for the recall of its omitted turns (none for an agent's loop: its old results go
# by clearing). Quoted lines hold more of what a question needs than whole turns with
# their placeholders and markers: measured (bench_quality.py, evidence recall), 0.5 / 0.7 /
# 0.85 of it: LoCoMo at 4k 0.776 / 0.789 / 0.797, at 8k 0.886 (0.7) / 0.891 (0.85);
# RealMem at 16k 0.726 and 32k 0.842 at 0.7 (0.740 / 0.851 at 0.3 of the whole room).
RECALL_SHARE = 0.7


def recall_room(state: PlanState, room: int) -> int:
    """The tokens a plan keeps for the recall: a conversation's, with relevance on, of the
    `room` the required parts and the newest turns leave."""
    layout = state.layout
    if state.policy.history.relevance != "bm25" or not state.turns or layout.agent:
        return 0
    return max(0, math.floor(room * RECALL_SHARE))


def turn_recall(
    state: PlanState, choices: Choices, decisions: Mapping[int, Decision], room: int
) -> dict[str, str] | None:
    """The recall message of the omitted turns' parts worth the most now, in `room`
    tokens; None when none is worth anything or fits."""
    known = state.older_merits
    if known is None or room <= 0:
        return None
    older, merit = known[0], known[1]
    stripped, msg = state.layout.stripped, state.layout.msg
    dropped, cleared = Action.DROP, Action.CLEAR
    units: list[tuple[int, ...]] = []
    values: list[float] = []
    costs = [choices.cost[c] for c in older]
    worth = per_token(merit, costs)
    for c, value in zip(older, worth, strict=True):
        keys = choices.items[c]
        if value <= 0.0 or not all(
            (d := decisions.get(k)) is not None and d.action in (dropped, cleared) for k in keys
        ):
            continue
        units.append(keys)
        values.append(value)
    if not units:
        return None

    def line_of(u: int) -> str | None:
        parts = [speaker_line(stripped[msg[k]]) for k in units[u]]
        lines = [p for p in parts if p is not None]
        return "\n".join(lines) if lines else None

    # Candidates in conversation order: recall_message keeps that order among those it takes.
    order = sorted(range(len(units)), key=lambda u: msg[units[u][0]])
    found = recall_message(line_of, order, values, room, state.tokenizer)
    return found[0] if found is not None else None


def with_recall(out: list[Any], recall: dict[str, Any], before: Any) -> list[Any]:
    """`out` with the recall message just before `before` (the current turn's first
    message), or at the end when that is not there as it came."""
    for n, m in enumerate(out):
        if m is before:
            return [*out[:n], recall, *out[n:]]
    return [*out, recall]
