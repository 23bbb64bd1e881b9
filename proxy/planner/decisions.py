"""Decisions: the allocator's grants -> a decision per item (kept, cut, dropped, summarized)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.planner.budget import Choice
from proxy.planner.clusters import Substitution
from proxy.planner.cuts import cut_decision
from proxy.planner.items import OVER_BUDGET, Action, Decision, Kind

if TYPE_CHECKING:
    from proxy.planner.allocation import Planner


def decide(
    planner: Planner,
    choices: list[Choice],
    sub: Substitution,
    rewritten: dict[int, tuple[str, str]],
    decisions: dict[int, Decision],
) -> None:
    placed = sub.stand_ins(choices)  # member item -> summary item that stands in for it
    grants, members, cost, items = sub.grants, sub.members, planner.cost, planner.items
    keep, drop = Action.KEEP, Action.DROP
    # Decisions are never changed once made: equal ones are shared (one per cost kept,
    # one per priority dropped) rather than made per item of a long history.
    kept: dict[int, Decision] = {}
    dropped = {p: Decision(drop, reason) for p, reason in OVER_BUDGET.items()}
    for c, choice in enumerate(choices):
        grant = grants.get(c, 0)
        host = choice.host
        if host is not None and grants.get(host, 0) == 0:
            grant = 0
        if c not in members:  # the common cases, kept lean: kept whole, or dropped
            if grant > 0 and grant == choice.cost and not rewritten:
                for key in choice.items:
                    tokens = cost[key]
                    d = kept.get(tokens)
                    if d is None:
                        d = kept[tokens] = Decision(keep, "fits the budget", None, tokens)
                    decisions[key] = d
                continue
            if grant == 0 and host is None and not placed:
                for key in choice.items:
                    decisions[key] = dropped[items[key].priority]
                continue
        for key in choice.items:
            decisions[key] = _item_decision(planner, c, choice, key, grant, sub, placed, rewritten)


def _item_decision(
    planner: Planner,
    c: int,
    choice: Choice,
    key: int,
    grant: int,
    sub: Substitution,
    placed: dict[int, int],
    rewritten: dict[int, tuple[str, str]],
) -> Decision:
    item = planner.items[key]
    if c in sub.members and c not in sub.active:
        return Decision(Action.DROP, "summary: its cluster was kept whole")
    if grant == 0:
        if key in placed:
            s = planner.items[placed[key]]
            return Decision(Action.SUMMARIZE, f"replaced by the summary in message {s.msg}")
        if choice.host is not None:
            return Decision(Action.DROP, "its tool group was dropped")
        return Decision(Action.DROP, OVER_BUDGET[item.priority])
    if c in sub.active:
        lost = sub.lost(c)
        anchor = sub.anchor(c, planner.items) if item.kind is not Kind.BLOCK else None
        return Decision(
            Action.SUMMARY_INSERTED,
            f"stands in for {len(lost)} dropped item(s)",
            planner.text.get(key),
            planner.cost[key],
            anchor,
        )
    if grant < choice.cost and choice.cut == key:
        mine = grant - (choice.cost - planner.cost[key])
        text = planner.text_of(key)
        return cut_decision(planner.tokenizer, text, planner.cost[key], mine, planner.marker)
    if key in rewritten:
        return Decision(Action.DEDUPE, rewritten[key][1], planner.text[key], planner.cost[key])
    return Decision(Action.KEEP, "fits the budget", tokens=planner.cost[key])
