"""Choices: what the planner keeps, cuts or drops together, in keep order, as parallel lists.

One choice per optional unit (a message, or a whole tool group), block, heading section or
proxy-made summary. Within its section and rank a choice is kept by its order: the newest
first (recency), the highest score first (score), or, for older conversation with
relevance on, by relevance to the current turn.
"""

from __future__ import annotations

import operator
from itertools import compress

from proxy.planner.budget.cuts import cut_floor
from proxy.planner.budget.grants import LAST_RANK, Choices
from proxy.planner.budget.older_order import order_older
from proxy.planner.budget.state import PlanState
from proxy.planner.budget.turn_choices import bind_turns, rank_turns
from proxy.planner.parts import Kind
from proxy.types import Overflow, Priority, Section

_TOOL_ROLES = ("tool", "function")
_SYSTEM = ("system", "developer")
# A choice's rank by its lead's priority (a required lead only in a group: ranked high).
_RANKS = {p: (p.rank if p is not Priority.REQUIRED else 1) for p in Priority}
_RESERVATION_ONLY = 4  # a rank the leftover pass (ranks 1-3) never reaches


def make_choices(state: PlanState, optional: list[bool]) -> Choices:
    """One choice per optional unit (a message or a whole tool group), block or section,
    then the history's bound into turns (turn_choices.py) and put in keep order;
    `optional`: per item, optional and not deduped."""
    layout = state.layout
    choices = None
    if len(layout.units) == len(layout.base) == len(optional):
        choices = _message_choices(state, optional)
    if choices is None:
        choices = _unit_choices(state, optional)
    turns = state.turns
    if turns:
        rank_turns(state, choices, bind_turns(state, choices, turns))
    order_older(state, choices)
    return choices


def _unit_choices(state: PlanState, optional: list[bool]) -> Choices:
    """make_choices one unit, block or section at a time."""
    layout = state.layout
    choices = Choices()
    unit_choice: dict[int, int] = {}
    base, section, priority, msg = layout.base, layout.section, layout.priority, layout.msg
    fields = layout.fields
    cost, modes, ranks = state.cost, state.modes, _RANKS
    c_items, c_section, c_rank, c_order = (
        choices.items,
        choices.section,
        choices.rank,
        choices.order,
    )
    c_cost, c_floor, c_host, c_cut, c_contiguous = (
        choices.cost,
        choices.floor,
        choices.host,
        choices.cut,
        choices.contiguous,
    )
    for u, unit in enumerate(layout.units):
        if len(unit) == 1:
            key = base[unit[0]]
            if not optional[key]:
                continue
            s = section[key]
            score, truncate, recency = modes[s]
            unit_choice[u] = len(c_items)
            if score or truncate:
                _add(state, choices, (key,), None)
                if key in fields and fields[key].summary_of and layout.role[key] in _SYSTEM:
                    # A client's summary sent as a system message (seed 004's shape; it was
                    # once required). In the history it is older history, ranked with the
                    # turns it stands in for by what the request needs now (one ranking:
                    # older_order.py), never on a reservation of its own: LoCoMo with one
                    # summary per session (40 questions, 2k) kept 0.56 of the evidence
                    # with summaries on their priority, 0.74 on their reservation only;
                    # elsewhere (a summary in the system prompt) only what is left after
                    # the turns. Whole or not at all: a summary that stands in for turns
                    # is not cut to a leftover sliver.
                    if layout.setup_end <= msg[key] < layout.current_start:
                        c_rank[-1] = Priority.LOW.rank
                        c_section[-1] = Section.RECENT_MESSAGES
                    else:
                        c_rank[-1] = LAST_RANK
                    c_floor[-1], c_cut[-1] = c_cost[-1], None
                continue
            c = cost[key]  # _add's common case, inlined: this runs per message
            c_items.append((key,))
            c_section.append(s)
            c_rank.append(ranks[priority[key]])
            c_order.append((-float(msg[key]), -key))
            c_cost.append(c)
            c_floor.append(c)
            c_host.append(None)
            c_cut.append(None)
            c_contiguous.append(recency)
            continue
        keys = tuple(base[i] for i in unit)
        if all(optional[k] for k in keys):  # else required, or deduped
            unit_choice[u] = len(c_items)
            _add(state, choices, keys, None)
    kind, units, unit_of = layout.kind, layout.units, layout.unit_of
    message, summary = Kind.MESSAGE, Kind.SUMMARY
    if len(kind) > len(base):  # blocks, heading sections or summaries: items of their own
        for key, k_kind in enumerate(kind):
            if not optional[key] or k_kind is message:
                continue  # chosen with its unit above
            if k_kind is summary:
                _add(state, choices, (key,), None)
                # A proxy-made summary lives on its section's reservation only: leftover
                # budget goes to the real turns first (relevance picks them far better
                # than a summary covers them: on LoCoMo, 0.72 vs 0.64 of evidence at 2k).
                c_rank[-1] = _RESERVATION_ONLY
            elif k_kind is Kind.BLOCK or k_kind is Kind.HEADING:
                u = unit_of[msg[key]]
                _add(state, choices, (key,), unit_choice.get(u) if len(units[u]) > 1 else None)
    return choices


def _message_choices(state: PlanState, optional: list[bool]) -> Choices | None:
    """make_choices when every item is a message of its own unit, in whole-list passes;
    None when some section orders by score or truncates (then one by one)."""
    layout = state.layout
    keys = list(compress(range(len(optional)), optional))
    n = len(keys)
    modes = state.modes
    first = layout.section[keys[0]] if keys else Section.RECENT_MESSAGES
    section = list(map(layout.section.__getitem__, keys))
    # One section, the common case: a count (by identity) rather than hashing each one.
    present = {first} if section.count(first) == n else set(section)
    if any(modes[s][0] or modes[s][1] for s in present):
        return None
    cost, priority = state.cost, layout.priority
    costs = list(map(cost.__getitem__, keys))
    rank = list(map(_RANKS.__getitem__, map(priority.__getitem__, keys)))
    if len(present) == 1:
        # One section: the keep order is by rank, then the newest first; no order needed.
        newest = list(range(n - 1, -1, -1))
        # Priority falls with age in most chats: the newest first is then the keep order.
        sort = any(map(operator.lt, rank, rank[1:]))  # somewhere an older one ranks higher
        keep: list[int] | None = sorted(newest, key=rank.__getitem__) if sort else newest
        # The ranks along the keep order (relevance reorders only within one rank).
        keep_ranks: list[int] | None = sorted(rank) if sort else rank[::-1]
        order: list[tuple[float, ...]] = []
        contiguous = [modes[first][2]] * n
    else:  # a message of its own: its key is its index, the newest first
        keep = keep_ranks = None
        order = list(zip(map(float.__neg__, map(float, keys)), map(int.__neg__, keys), strict=True))
        contiguous = [modes[s][2] for s in section]
    nones: list[int | None] = [None] * n  # (a message alone is never cut: its floor is its cost)
    return Choices(
        None, section, rank, order, costs, costs, nones, nones.copy(), contiguous,
        keep, True, keys, keep_ranks,
    )  # fmt: skip


def _add(state: PlanState, choices: Choices, keys: tuple[int, ...], host: int | None) -> None:
    layout = state.layout
    lead = keys[0]
    score, truncate, recency = state.modes[layout.section[lead]]
    position = float(layout.msg[lead])
    if score:
        value = layout.fields_of(lead).score
        order: tuple[float, ...] = (-(value or 0.0), -position, -lead)
    else:
        order = (-position, -lead)
    cost = sum(state.cost[k] for k in keys)
    cut = _cuttable(state, keys) if len(keys) > 1 or truncate else None
    floor = cost
    if cut is not None:
        floor = cut_floor(state.tokenizer, state.text_of(cut), cost, state.marker)
    choices.items.append(keys)
    choices.section.append(layout.section[lead])
    choices.rank.append(_RANKS[layout.priority[lead]])
    choices.order.append(order)
    choices.cost.append(cost)
    choices.floor.append(floor)
    choices.host.append(host)
    choices.cut.append(cut if floor < cost else None)
    choices.contiguous.append(recency)


def _cuttable(state: PlanState, keys: tuple[int, ...]) -> int | None:
    """The item a cut would shorten: a group's largest tool result, or a truncate
    section's item; None when the choice can only be kept whole or dropped."""
    layout, cost = state.layout, state.cost
    if len(keys) > 1:
        if layout.msg[keys[0]] in layout.agent:
            # An agent's older exchange is kept whole or dropped: on the agent runs a
            # result cut to the room left rarely still holds what the next command needs,
            # where smaller whole exchanges after it in the keep order do (results the next
            # command repeats: 0.59 -> 0.61 of them kept at 16k, 0.34 -> 0.39 at 8k).
            return None
        role = layout.role
        cleared = state.cleared  # a placeholder is not cut: it is already the least
        results = [
            k for k in keys if role[k] in _TOOL_ROLES and state.text_of(k) and k not in cleared
        ]
        return max(results, key=lambda k: (cost[k], -k)) if results else None
    key = keys[0]
    if layout.kind[key] in (Kind.OPAQUE, Kind.SUMMARY) or not state.text_of(key):
        return None
    overflow = state.sections[layout.section[key]].overflow
    return key if overflow is Overflow.TRUNCATE else None
