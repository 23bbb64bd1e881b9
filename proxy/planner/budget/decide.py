"""Decisions: the allocator's grants -> a decision per item (kept, cut, dropped, summarized)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import compress

from proxy.planner.budget.clusters import Substitution
from proxy.planner.budget.cuts import cut_decision
from proxy.planner.budget.grants import Choices
from proxy.planner.budget.state import PlanState
from proxy.planner.parts import MESSAGE, OVER_BUDGET, Action, Decision, Kind

TURN_DROPPED = "its turn was dropped"
REPLY_OMITTED = "reply omitted: over budget"


def decide(
    state: PlanState,
    choices: Choices,
    sub: Substitution,
    rewritten: dict[int, tuple[str, str]],
    decisions: dict[int, Decision],
) -> None:
    placed = sub.stand_ins(choices)  # member item -> summary item that stands in for it
    grants, members, cost = sub.grants, sub.members, state.cost
    priority = state.layout.priority
    keep, drop = Action.KEEP, Action.DROP
    # Decisions are never changed once made: equal ones are shared (one per cost kept,
    # one per priority dropped) rather than made per item of a long history.
    kept: dict[int, Decision] = {}
    dropped = {p: Decision(drop, reason) for p, reason in OVER_BUDGET.items()}
    hosts, costs = choices.host, choices.cost
    n = len(costs)
    cleared = state.cleared
    masks = choices.mask
    if (
        not members
        and not placed
        and not rewritten
        and not cleared
        and not masks
        and len(grants) == n
        and hosts.count(None) == n
    ):
        # The common case in whole-list passes: choices kept whole or dropped, few cut.
        given = [grants[c] for c in range(n)]
        whole = [g > 0 and g == full for g, full in zip(given, costs, strict=True)]
        singles = [len(keys) == 1 for keys in choices.items]
        if all(singles):
            leads = [keys[0] for keys in choices.items]
            keys_kept = list(compress(leads, whole))
            for tokens in {cost[k] for k in keys_kept} - kept.keys():
                kept[tokens] = Decision(keep, "fits the budget", None, tokens)
            decisions.update(
                zip(keys_kept, map(kept.__getitem__, map(cost.__getitem__, keys_kept)), strict=True)
            )
            gone = [k for k, g in zip(leads, given, strict=True) if g == 0]
            decisions.update(
                zip(gone, map(dropped.__getitem__, map(priority.__getitem__, gone)), strict=True)
            )
            rest = [c for c, (g, w) in enumerate(zip(given, whole, strict=True)) if g and not w]
            granted = Granted(state, choices, sub, placed, rewritten)
            for c in rest:
                key = leads[c]
                decisions[key] = granted.decision(c, key, given[c])
            return
    granted = Granted(state, choices, sub, placed, rewritten)
    for c, keys in enumerate(choices.items):
        grant = grants.get(c, 0)
        host = hosts[c]
        if host is not None and grants.get(host, 0) == 0:
            grant = 0
        if c not in members:  # the common cases, kept lean: kept whole, or dropped
            if grant > 0 and grant == costs[c] and not rewritten and not cleared:
                for key in keys:
                    tokens = cost[key]
                    d = kept.get(tokens)
                    if d is None:
                        d = kept[tokens] = Decision(keep, "fits the budget", None, tokens)
                    decisions[key] = d
                continue
            if grant == 0 and host is None and not placed and c not in masks:
                for key in keys:
                    decisions[key] = dropped[priority[key]]
                continue
        for key in keys:
            decisions[key] = granted.decision(c, key, grant)


@dataclass(frozen=True, slots=True)
class Granted:
    """What the allocator granted, read for one item at a time (one that is neither kept
    whole nor dropped plainly)."""

    state: PlanState
    choices: Choices
    sub: Substitution
    placed: dict[int, int]  # dropped member item -> the summary item standing in for it
    rewritten: dict[int, tuple[str, str]]  # item key -> (text, reason) from dedupe

    def decision(self, c: int, key: int, grant: int) -> Decision:
        """The decision for item `key` of choice `c`, granted `grant` tokens."""
        state, choices, sub, placed = self.state, self.choices, self.sub, self.placed
        layout = state.layout
        if c in sub.members and c not in sub.active:
            return Decision(Action.DROP, "summary: its cluster was kept whole")
        mask = choices.mask.get(c) if grant == 0 else None
        if mask is not None:  # a turn's reply: its placeholder beside its question
            host = choices.host[c]
            shown = host is None or bool(sub.grants.get(host))  # None: a question required
            if not shown:
                return Decision(Action.DROP, TURN_DROPPED)
            if key != mask.key:
                return Decision(Action.DROP, REPLY_OMITTED)
            return Decision(Action.CLEAR, REPLY_OMITTED, mask.text, mask.tokens)
        if grant == 0:
            if key in placed:
                where = layout.msg[placed[key]]
                return Decision(Action.SUMMARIZE, f"replaced by the summary in message {where}")
            host = choices.host[c]
            if host is not None and not sub.grants.get(host):
                lead = choices.items[host][0]
                if layout.role[lead] == "user":
                    return Decision(Action.DROP, TURN_DROPPED)
                return Decision(Action.DROP, "its tool group was dropped")
            return Decision(Action.DROP, OVER_BUDGET[layout.priority[key]])
        if c in sub.active:
            lost = sub.lost(c)
            anchor = sub.anchor(c, layout.msg) if layout.kind[key] is not Kind.BLOCK else None
            return Decision(
                Action.SUMMARY_INSERTED,
                f"stands in for {len(lost)} dropped item(s)",
                state.text.get(key),
                state.cost[key],
                anchor,
            )
        if grant < choices.cost[c] and choices.cut[c] == key:
            mine = grant - (choices.cost[c] - state.cost[key])
            text = state.text_of(key)
            recall = layout.recall_id(MESSAGE, layout.msg[key])
            size = (state.cost[key], mine)
            return cut_decision(state.tokenizer, text, size, state.marker, recall)
        if key in state.cleared:
            return state.cleared[key]
        if key in self.rewritten:
            reason = self.rewritten[key][1]
            return Decision(Action.DEDUPE, reason, state.text[key], state.cost[key])
        return Decision(Action.KEEP, "fits the budget", tokens=state.cost[key])
