"""Decisions: the allocator's grants -> a decision per item (kept, cut, dropped, summarized)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.planner.budget import Choices
from proxy.planner.clusters import Substitution
from proxy.planner.cuts import cut_decision
from proxy.planner.items import OVER_BUDGET, Action, Decision, Kind

if TYPE_CHECKING:
    from proxy.planner.allocation import Planner


def decide(
    planner: Planner,
    choices: Choices,
    sub: Substitution,
    rewritten: dict[int, tuple[str, str]],
    decisions: dict[int, Decision],
) -> None:
    placed = sub.stand_ins(choices)  # member item -> summary item that stands in for it
    grants, members, cost = sub.grants, sub.members, planner.cost
    priority = planner.layout.priority
    keep, drop = Action.KEEP, Action.DROP
    # Decisions are never changed once made: equal ones are shared (one per cost kept,
    # one per priority dropped) rather than made per item of a long history.
    kept: dict[int, Decision] = {}
    dropped = {p: Decision(drop, reason) for p, reason in OVER_BUDGET.items()}
    hosts, costs = choices.host, choices.cost
    for c, keys in enumerate(choices.items):
        grant = grants.get(c, 0)
        host = hosts[c]
        if host is not None and grants.get(host, 0) == 0:
            grant = 0
        if c not in members:  # the common cases, kept lean: kept whole, or dropped
            if grant > 0 and grant == costs[c] and not rewritten:
                for key in keys:
                    tokens = cost[key]
                    d = kept.get(tokens)
                    if d is None:
                        d = kept[tokens] = Decision(keep, "fits the budget", None, tokens)
                    decisions[key] = d
                continue
            if grant == 0 and host is None and not placed:
                for key in keys:
                    decisions[key] = dropped[priority[key]]
                continue
        for key in keys:
            decisions[key] = _item_decision(planner, c, choices, key, grant, sub, placed, rewritten)


def _item_decision(
    planner: Planner,
    c: int,
    choices: Choices,
    key: int,
    grant: int,
    sub: Substitution,
    placed: dict[int, int],
    rewritten: dict[int, tuple[str, str]],
) -> Decision:
    layout = planner.layout
    if c in sub.members and c not in sub.active:
        return Decision(Action.DROP, "summary: its cluster was kept whole")
    if grant == 0:
        if key in placed:
            where = layout.msg[placed[key]]
            return Decision(Action.SUMMARIZE, f"replaced by the summary in message {where}")
        if choices.host[c] is not None:
            return Decision(Action.DROP, "its tool group was dropped")
        return Decision(Action.DROP, OVER_BUDGET[layout.priority[key]])
    if c in sub.active:
        lost = sub.lost(c)
        anchor = sub.anchor(c, layout.msg) if layout.kind[key] is not Kind.BLOCK else None
        return Decision(
            Action.SUMMARY_INSERTED,
            f"stands in for {len(lost)} dropped item(s)",
            planner.text.get(key),
            planner.cost[key],
            anchor,
        )
    if grant < choices.cost[c] and choices.cut[c] == key:
        mine = grant - (choices.cost[c] - planner.cost[key])
        text = planner.text_of(key)
        return cut_decision(planner.tokenizer, text, planner.cost[key], mine, planner.marker)
    if key in rewritten:
        return Decision(Action.DEDUPE, rewritten[key][1], planner.text[key], planner.cost[key])
    return Decision(Action.KEEP, "fits the budget", tokens=planner.cost[key])
