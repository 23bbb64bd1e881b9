"""Older history's keep order: by what the request is doing now (history/rank.py), each
turn's question before what it hosts."""

from __future__ import annotations

from itertools import compress

from proxy.planner.budget.grants import Choices
from proxy.planner.budget.state import PlanState
from proxy.planner.budget.turn_choices import hosts_first
from proxy.planner.history import (
    keep_order,
    merits,
    now_of,
    per_token,
    reused,
    trail_weights,
    unit_act,
)
from proxy.planner.parts import Layout
from proxy.types import Priority, Section

_TOOL_ROLES = ("tool", "function")


def order_older(state: PlanState, choices: Choices) -> None:
    """Older history (low priority recent_messages) in keep order: by what the request is
    doing now (history/rank.py) when relevance is on, else the newest first; a turn's
    question always before its reply and exchanges (turn_choices.hosts_first)."""
    history = state.policy.history
    section, low = Section.RECENT_MESSAGES, Priority.LOW.rank
    if choices.keep is not None:  # one section: the low ones, if it is recent_messages
        older = []
        if choices.section and choices.section[0] is section:
            older = list(compress(range(len(choices.rank)), map(low.__eq__, choices.rank)))
    else:
        older = [
            c
            for c, (s, r) in enumerate(zip(choices.section, choices.rank, strict=True))
            if s is section and r == low
        ]
    if not older:
        return
    hosted = any(choices.host[c] is not None for c in older)
    if history.relevance != "bm25":
        if not hosted:
            return
        msg, items = state.layout.msg, choices.items
        ordered = sorted(older, key=lambda c: -msg[items[c][0]])  # the newest first
    else:
        known = state.older_merits
        if known is not None and known[0] == tuple(older):
            merit, positions = known[1], known[2]
        else:
            texts, positions, groups = _older_texts(state, choices, older)
            layout, items = state.layout, choices.items
            reuse = (
                reused(layout, [items[c] for c in older], state.terms)
                if groups
                else [0] * len(older)
            )
            merit = merits(texts, reuse, now_of(layout), state.terms)
            if groups and (layout.agent or layout.commands):
                merit = _trail_weighted(layout, [items[c] for c in older], merit)
            state.older_merits = tuple(older), merit, positions
        costs = [choices.cost[c] for c in older]
        layout = state.layout
        if layout.agent or layout.commands:
            # An agent's older units by merit per token: what it read is worth its size
            # (a whole file the next step edits), not favoured for being short as a
            # chat's lines are (per square root). Claude Code set at 32k: 0.723 -> 0.766.
            values = [m / max(c, 1) for m, c in zip(merit, costs, strict=True)]
        else:
            values = per_token(merit, costs)
        sequence = keep_order(values, positions, history.neighbors)
        ordered = [older[j] for j in sequence]
        for c in older:
            choices.contiguous[c] = False
    if hosted:
        ordered = hosts_first(choices, ordered)
    keep = choices.keep
    if keep is not None:  # one section (recent_messages): its low run is the sequence
        first = next(p for p, c in enumerate(keep) if choices.rank[c] == low)
        keep[first : first + len(older)] = ordered
        return
    order = choices.order
    for r, c in enumerate(ordered):
        order[c] = (float(r),)


def _older_texts(
    state: PlanState, choices: Choices, older: list[int]
) -> tuple[list[str], list[int], bool]:
    """The older units' texts as ranked, their positions, and whether any is a group."""
    layout, text = state.layout, state.text
    texts_of, msg = layout.text, layout.msg
    # An agent's loop (its history holds exchanges): a lone message (a malformed reply, a
    # format reminder, a remark between calls) names what the results hold without holding
    # it, and is ranked after the units that match, newest first (agent runs at 16k,
    # evidence recall 0.67 -> 0.73; tau-airline at 2,800 0.37 -> 0.43).
    loop = bool(layout.agent)
    texts: list[str] = []
    positions: list[int] = []
    groups = False
    if choices.lead is not None and not text and not loop:  # each a message, as it came
        leads = list(map(choices.lead.__getitem__, older)) if choices.lead else []
        texts, positions = list(map(texts_of.__getitem__, leads)), list(map(msg.__getitem__, leads))
        older_texts: list[int] = []
    else:
        older_texts = older
    items = choices.items if older_texts else []
    for c in older_texts:  # runs per older unit: text_of inlined
        keys = items[c]
        if len(keys) == 1:
            k = keys[0]
            texts.append("" if loop else (text[k] if k in text else texts_of[k]))
        elif any(layout.role[k] in _TOOL_ROLES for k in keys):
            # a tool exchange or a step: what its results hold (a cleared one, as it came)
            groups = True
            texts.append(" ".join(texts_of[k] for k in keys if layout.role[k] in _TOOL_ROLES))
        else:  # a question or a reply of several messages
            texts.append("" if loop else " ".join(text.get(k, texts_of[k]) for k in keys))
        positions.append(msg[keys[0]])
    return texts, positions, groups


def _trail_weighted(
    layout: Layout, older: list[tuple[int, ...]], merit: list[float]
) -> list[float]:
    """An agent's older units' merits weighed by its trail (history/trail.py): a read of a
    file it read again since, or a result whose lines a later one shows again, counts
    less."""
    msg, unit_of, units, commands = layout.msg, layout.unit_of, layout.units, layout.commands
    acted = [u for u, members in enumerate(units) if len(members) > 1 or members[0] in commands]
    text, roles, base = layout.text, layout.roles, layout.base
    shown = [
        "\n".join(text[base[i]] for i in units[u] if roles[i] in _TOOL_ROLES) for u in acted
    ]
    weights = trail_weights([unit_act(layout, units[u]) for u in acted], shown)
    weight_of = {u: w for u, w in zip(acted, weights, strict=True) if w != 1.0}
    if not weight_of:
        return merit
    return [
        m * weight_of.get(unit_of[msg[keys[0]]], 1.0) for keys, m in zip(older, merit, strict=True)
    ]
