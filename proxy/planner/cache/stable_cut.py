"""Stable cut: where cache mode cuts a conversation's history, in steps counted from its start.

A function of the request and the policy alone (no memory of earlier turns): with history
tokens S counted from the conversation's start and room R for history, the cut drops the
units before the first unit boundary at or after k * step tokens, k = ceil((S - R) / step).
S - R is the whole conversation's size minus a constant, so it only grows as the
conversation does, and the cut moves only when it grows by a whole step: the turns between
two steps append to an unchanged forwarded prefix, which the provider's prompt cache serves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from proxy.planner.parts import Layout
from proxy.types import Priority, Section

_SYSTEM = ("system", "developer")


@dataclass(frozen=True, slots=True)
class History:
    """The conversation's history units (message indexes each, oldest first) and costs."""

    units: list[list[int]]
    cost: list[int]  # per unit: its messages' tokens as forwarded untrimmed

    @property
    def tokens(self) -> int:
        return sum(self.cost)


def history_units(layout: Layout, full: Sequence[int]) -> History:
    """The units cache mode may cut: whole units (a message, or a tool group) of optional
    conversation history before the current turn; their items in recent_messages, none
    required.
    System and developer messages, tagged items of other sections and the current turn,
    with an agent's tool exchanges after it, stay where they are (the planner decides about
    them as it does without cache mode)."""
    section, priority, roles, base = layout.section, layout.priority, layout.roles, layout.base
    recent, required, split = Section.RECENT_MESSAGES, Priority.REQUIRED, layout.split
    items_of = layout.items_of
    units: list[list[int]] = []
    cost: list[int] = []
    if not split and len(layout.units) == len(base):  # every message a unit and one item
        for i in range(min(layout.current_start, len(base))):  # per message: kept lean
            k = base[i]
            if section[k] is recent and priority[k] is not required and roles[i] not in _SYSTEM:
                units.append([i])
                cost.append(full[i])
        return History(units, cost)
    for unit in layout.units:
        if not unit or unit[0] >= layout.current_start:
            break  # an agent's exchanges after the task: the planner clears them
        ok = all(
            roles[i] not in _SYSTEM
            and all(section[k] is recent and priority[k] is not required for k in items_of(i))
            for i in unit
        )
        if ok:
            units.append(list(unit))
            cost.append(sum(full[i] for i in unit))
    return History(units, cost)


def step_of(budget: int, watermark: float) -> int:
    """Tokens of history the cut moves by: (1 - watermark) of the budget, at least 1."""
    return max(1, math.floor((1.0 - watermark) * budget))


def cut_index(cost: Sequence[int], room: int, step: int) -> int:
    """How many leading units to drop so that the rest fits `room`, cutting at the first
    unit boundary at or after k * step tokens from the start (k the fewest whole steps).

    The units kept then cost at most `room`: they start at or after k * step and the
    history ends at S, with S - k * step <= room."""
    total = sum(cost)
    if total <= room:
        return 0
    k = math.ceil((total - max(room, 0)) / step)
    mark = k * step
    seen = 0
    for n, c in enumerate(cost):
        if seen >= mark:
            return n
        seen += c
    return len(cost)
