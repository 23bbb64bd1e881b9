"""Turn choices: the history's choices bound into turns, so no turn is forwarded in half.

A turn's question (with what goes with it) is one choice; its reply another, hosted by the
question: the allocator grants a hosted choice only once its host is granted, and a
reply not granted beside a kept question is masked (a one-line placeholder in the
assistant's place), so the question costs that placeholder too. A reply no longer than its
placeholder joins its question. The turn's tool exchanges are hosted by the question as
well: what a result held goes with the question that asked for it.

The newest turns are pinned before any choice is made (pinned.py); the others are older
history (`rank_turns`), ranked by relevance (older_order.py), unless the client tagged
them. Hosts always come before what they host in the keep order (`hosts_first`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxy.planner.budget.grants import Choices
from proxy.planner.budget.placeholders import Mask
from proxy.planner.budget.state import PlanState
from proxy.planner.parts import Kind, Turn
from proxy.types import Priority, Section

LOW = Priority.LOW.rank
# How a part was tagged when the client tagged nothing (parts/tags.py).
UNTAGGED = frozenset(("default", "agent history"))


def mask_of(state: PlanState, keys: Sequence[int]) -> Mask:
    """The placeholder form of a reply made of items `keys` (the last one carries it),
    naming the tokens the reply held."""
    cost, layout = state.cost, state.layout
    source = layout.recall_source(layout.msg[keys[0]])
    return Mask(keys[-1], state.placeholder_tokens[0], sum(cost[k] for k in keys), source)


@dataclass(slots=True)
class TurnChoices:
    """Per bound turn: its question's choice (None: the question is pinned or required),
    its reply's and its exchanges' choices."""

    question: list[int | None]
    reply: list[int | None]
    exchanges: list[list[int]]


def bind_turns(state: PlanState, choices: Choices, turns: Sequence[Turn]) -> TurnChoices:
    """Merge each turn's question and reply into their choices, host the rest by the
    question, and price the masks. Rewrites `choices` in place (its keep order is then
    made by sorting: `keep` is cleared)."""
    layout = state.layout
    msg, kind, base, unit_of = layout.msg, layout.kind, layout.base, layout.unit_of
    of_unit: dict[int, int] = {}  # unit -> its choice (units' own choices only)
    for c, keys in enumerate(choices.items):
        lead = keys[0]
        if kind[lead] is Kind.MESSAGE and lead == base[msg[lead]]:
            of_unit[unit_of[msg[lead]]] = c
    merge: list[list[int]] = []  # groups of old choices that become one
    q_of: list[int | None] = []  # per turn: its question's group (index into merge)
    r_of: list[int | None] = []
    x_of: list[list[int]] = []  # old choice indexes of its exchanges
    masks: dict[int, Mask] = {}  # group -> the mask of its reply
    for turn in turns:
        # The opening's question is the setup's: what is attached to it stands alone.
        asking = (*turn.question, *turn.attached) if turn.question else ()
        asked = [of_unit[unit_of[i]] for i in asking if unit_of[i] in of_unit]
        answer = [of_unit[unit_of[i]] for i in turn.reply if unit_of[i] in of_unit]
        q = r = None
        if asked:
            q = len(merge)
            merge.append(asked)
        if answer:
            mask = mask_of(state, [k for c in answer for k in choices.items[c]])
            full = sum(choices.cost[c] for c in answer)
            if q is not None and full <= 2 * mask.tokens:
                merge[q].extend(answer)  # no longer than its placeholder: with its question
            else:
                r = len(merge)
                merge.append(answer)
                masks[r] = mask
        q_of.append(q)
        r_of.append(r)
        x_of.append([of_unit[u] for u in turn.exchanges if u in of_unit])
    if not merge:
        return TurnChoices([], [], [])
    new_of = _regroup(choices, merge, msg)
    for r, mask in masks.items():  # the question pays for the mask; the reply is the rest
        c = new_of[merge[r][0]]
        choices.cost[c] -= mask.tokens
        choices.floor[c] = choices.cost[c]
        choices.mask[c] = mask
    out = TurnChoices([], [], [])
    for q, r, xs in zip(q_of, r_of, x_of, strict=True):
        qc = new_of[merge[q][0]] if q is not None else None
        rc = new_of[merge[r][0]] if r is not None else None
        if qc is not None and rc is not None:
            choices.cost[qc] += choices.mask[rc].tokens
            choices.floor[qc] = choices.cost[qc]
        for hosted in (rc, *(new_of[x] for x in xs)):
            if hosted is not None:
                choices.host[hosted] = qc
        out.question.append(qc)
        out.reply.append(rc)
        out.exchanges.append([new_of[x] for x in xs])
    return out


def _regroup(choices: Choices, merge: list[list[int]], msg: list[int]) -> list[int]:
    """Rewrite `choices` so that each group of `merge` is one choice (its items together,
    costs summed, never cut); old choice index -> new one."""
    n = len(choices.rank)
    first = list(range(n))  # old choice -> the first of its group
    groups: dict[int, list[int]] = {}
    for group in merge:
        lead = group[0]
        for c in group:
            first[c] = lead
        if len(group) > 1:
            groups[lead] = group
    keep = [c for c in range(n) if first[c] == c]
    place = [0] * n
    for j, c in enumerate(keep):
        place[c] = j
    new_of = [place[f] for f in first]
    items = choices.items
    order = choices.order
    if not order:  # made in a known keep order: each its own order, the newest first
        order = [(-float(msg[keys[0]]), -float(keys[0])) for keys in items]
    cost, floor, cut, host = choices.cost, choices.floor, choices.cut, choices.host
    rank = choices.rank
    new_items = [items[c] for c in keep]
    new_cost = [cost[c] for c in keep]
    new_floor = [floor[c] for c in keep]
    new_cut = [cut[c] for c in keep]
    new_rank = [rank[c] for c in keep]
    for lead, group in groups.items():
        j = place[lead]
        new_items[j] = tuple(sorted(k for g in group for k in items[g]))
        new_cost[j] = new_floor[j] = sum(cost[g] for g in group)
        new_cut[j] = None
        new_rank[j] = min(rank[g] for g in group)
    choices.made_items, choices.rank = new_items, new_rank
    choices.cost, choices.floor, choices.cut = new_cost, new_floor, new_cut
    choices.section = [choices.section[c] for c in keep]
    choices.order = [order[c] for c in keep]
    choices.host = [None if (h := host[c]) is None else new_of[h] for c in keep]
    choices.contiguous = [choices.contiguous[c] for c in keep]
    choices.keep = choices.keep_ranks = choices.lead = None
    choices.singles = False
    return new_of


def rank_turns(state: PlanState, choices: Choices, bound: TurnChoices) -> None:
    """The history's turns that are not pinned (pinned.py) ranked as older history (low
    priority, by what the request needs), but for a turn the client tagged: its question
    and reply ranked as its most important part. (A tag that names only an id or a cluster
    leaves a part the section and priority of its place: untagged, as far as ranking goes.)"""
    rank, items = choices.rank, choices.items
    layout = state.layout
    section, priority, tag = layout.section, layout.priority, layout.tag
    recent = len(bound.question) - state.policy.history.keep_recent

    def tagged(k: int, place: Priority) -> bool:
        return tag[k] not in UNTAGGED and (
            section[k] is not Section.RECENT_MESSAGES or priority[k] is not place
        )

    for t, (q, r, xs) in enumerate(zip(bound.question, bound.reply, bound.exchanges, strict=True)):
        place = Priority.HIGH if t >= recent else Priority.LOW
        parts = [c for c in (q, r) if c is not None]
        turn = LOW
        if any(tagged(k, place) for c in parts for k in items[c]):
            turn = min(rank[c] for c in parts)
        for c in parts:
            rank[c] = turn
        for c in xs:
            rank[c] = LOW


def hosts_first(choices: Choices, sequence: list[int]) -> list[int]:
    """`sequence` (choices in keep order) with each host moved just before the first
    choice it hosts, when it came later."""
    host = choices.host
    placed: set[int] = set()
    out: list[int] = []
    members = set(sequence)
    for c in sequence:
        h = host[c]
        if h is not None and h not in placed and h in members:
            placed.add(h)
            out.append(h)
        if c not in placed:
            placed.add(c)
            out.append(c)
    return out
