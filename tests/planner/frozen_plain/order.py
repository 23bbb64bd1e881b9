"""Frozen copy of proxy/planner/plain_order.py (the old lean path, commit 70383c6), tests only.

Plain order: plain chat's optional units (the lean planner's choices) in keep order.

planner._choices, _history_order and budget.allocate's sort, for plain chat: every
optional unit is in recent_messages, high priority (the newest `keep_recent` turns) or
low (older history). The high ones are kept newest first, a contiguous run; the low ones
by relevance to the current turn (or newest first when relevance is off).
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.planner.budget.grants import MIN_KEPT_TOKENS
from proxy.planner.budget.older_order import NEWEST_FACTOR, NEWEST_UNITS
from proxy.planner.history import Now, keep_order, worth
from proxy.policy import Policy
from proxy.relevance import TermIndex
from proxy.types import Priority, Tokenizer
from tests.planner.frozen_plain.chat import Chat

_TOOL_ROLES = ("tool", "function")


@dataclass(slots=True)
class Choices:
    """The optional units in keep order, as parallel lists: the high priority run
    (`lead[:high]`), then the low priority run."""

    lead: list[int]  # the unit's first message
    cost: list[int]
    high: int  # how many lead the order with high priority
    relevance: bool  # the low run is in relevance order (not contiguous)
    groups: dict[int, tuple[list[int], int, int | None]]  # choice -> (members, floor, cut)


def order_choices(
    chat: Chat,
    costs: list[int],
    removed: dict[int, str],
    policy: Policy,
    terms: TermIndex | None,
    cutting: tuple[Tokenizer, int],
    recent_room: int,
) -> Choices:
    """One choice per optional unit not deduped, in keep order. `cutting`: the tokenizer
    and the marker's tokens, to size what a tool group can be cut to; `recent_room`: the
    tokens the newest turns hold at most (the rest join the older ones, older_order.cap_recent)."""
    priority, required, high = chat.priority, Priority.REQUIRED, Priority.HIGH
    members: dict[int, list[int]] = {}  # a tool group's lead -> its messages
    if chat.units is None:
        optional = [p is not required for p in priority]
        for i in removed:
            optional[i] = False
        leads = [i for i, keep in enumerate(optional) if keep]
    else:
        leads = []
        for unit in chat.units:
            first = unit[0]
            if priority[first] is required or (len(unit) == 1 and first in removed):
                continue
            if len(unit) > 1:
                members[first] = unit
            leads.append(first)
    recent = [i for i in reversed(leads) if priority[i] is high]
    older = [i for i in leads if priority[i] is not high]  # low: plain chat has no medium
    used = 0
    for k, i in enumerate(recent):  # newest first: those past the room join the older
        used += sum(costs[m] for m in members[i]) if i in members else costs[i]
        if used > (recent_room * NEWEST_FACTOR if k < NEWEST_UNITS else recent_room):
            older = sorted(older + recent[k:])
            recent = recent[:k]
            break
    relevance = policy.history.relevance == "bm25" and bool(older)
    if relevance:
        older = _by_relevance(chat, older, members, policy, (terms, costs))
    else:
        older.reverse()
    lead = recent + older
    cost = [costs[i] for i in lead]
    groups: dict[int, tuple[list[int], int, int | None]] = {}
    if members:
        for c, i in enumerate(lead):
            group = members.get(i)
            if group is not None:
                cost[c] = total = sum(costs[k] for k in group)
                floor, cut = _cut(chat, costs, group, total, cutting)
                groups[c] = (group, floor, cut)
    return Choices(lead, cost, len(recent), relevance, groups)


def _by_relevance(
    chat: Chat,
    older: list[int],
    members: dict[int, list[int]],
    policy: Policy,
    index: tuple[TermIndex | None, list[int]],
) -> list[int]:
    """The older units (by lead, in message order) in keep order (history/rank.py): worth
    against the current turn's user text, with the rest of the current turn, the newest
    turns and the messages just before the turn as context."""
    texts, roles, start = chat.texts, chat.roles, chat.start
    docs = [texts[i] if i not in members else " ".join(texts[k] for k in members[i]) for i in older]
    asked = [texts[i] for i in range(start, len(texts)) if roles[i] == "user"]
    context = [texts[i] for i in range(start, len(texts)) if roles[i] != "user"]
    high = Priority.HIGH  # high priority items are all in recent_messages
    context += [t for t, p in zip(texts, chat.priority, strict=True) if p is high]
    context += [f"{texts[i]}\n" for i in range(max(0, start - 4), start)]
    now = Now("\n".join(asked), "", "\n".join(context), False)
    terms, message_costs = index
    costs = [
        sum(message_costs[k] for k in members[i]) if i in members else message_costs[i]
        for i in older
    ]
    values = worth(docs, costs, [0] * len(older), now, terms if terms is not None else TermIndex())
    order = keep_order(values, older, policy.history.neighbors)
    return [older[k] for k in order]


def _cut(
    chat: Chat,
    costs: list[int],
    unit: list[int],
    total: int,
    cutting: tuple[Tokenizer, int],
) -> tuple[int, int | None]:
    """A tool group's floor and the result a cut shortens (planner._choice, _cuttable)."""
    results = [k for k in unit if chat.roles[k] in _TOOL_ROLES and chat.texts[k]]
    if not results:
        return total, None
    tokenizer, marker = cutting
    cut = max(results, key=lambda k: (costs[k], -k))
    room = tokenizer.count_text(chat.texts[cut]) - MIN_KEPT_TOKENS - marker
    floor = total - room if room > 0 else total
    return floor, (cut if floor < total else None)
