"""Budget: pure arithmetic from choices with costs and a budget to the tokens each one gets.

Each section first gets its reservation, floor(B * ratio); within it, items in its keep
order. What is left goes to whatever still wants more, high priority first, then medium,
then low, so no token of the budget is wasted. An item that does not fit whole is cut to
the room left when it is truncatable (the planner says so by its `floor`: an item of a
`truncate` section, or a tool group by its largest result); otherwise it is dropped, and
smaller items after it in the keep order may still fit — unless the order is recency
(`contiguous`): then what is kept is an unbroken run of the newest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from proxy.types import Section

SECTIONS = tuple(Section)  # the contract's order: ties between sections follow it
MIN_KEPT_TOKENS = 32  # a truncated item keeps at least this much text, or is dropped


@dataclass(slots=True)
class Choice:
    """Items kept, cut or dropped together (one message, one block, or one tool group)."""

    items: tuple[int, ...]
    section: Section
    rank: int  # 1 high, 2 medium, 3 low
    order: tuple[float, ...]  # keep order within its section and rank (smaller first)
    cost: int
    floor: int  # the least it can be cut to; `cost` when it cannot be cut
    host: int | None = None  # the choice it needs (a block inside a tool group)
    cut: int | None = None  # the item a cut shortens (planner bookkeeping; unused here)
    contiguous: bool = False  # recency order: once one does not fit, later ones wait


def compute_budget(
    window: int | None, ratio: float, reserve_output: bool, max_output: int | None
) -> int | None:
    """The contract: floor(ratio * window), never more than window - max_output - 16."""
    if window is None:
        return None
    budget = math.floor(ratio * window)
    if reserve_output and max_output is not None:
        budget = min(budget, window - max_output - 16)
    return max(budget, 0)


def reservations(
    budget: int, ratios: Mapping[Section, float], required: Mapping[Section, int]
) -> dict[Section, int]:
    """Each section's floor(B * ratio), less what its required items already take."""
    return {
        s: max(0, math.floor(budget * ratios.get(s, 0.0)) - required.get(s, 0)) for s in SECTIONS
    }


def allocate(
    choices: Sequence[Choice],
    available: int,
    reserved: Mapping[Section, int],
    section_rank: Mapping[Section, int],
) -> list[int]:
    """Tokens granted to each choice: its cost (kept), less (cut to that), or 0 (dropped)."""
    grants = [0] * len(choices)
    keys = [(choice.rank, choice.order) for choice in choices]
    by_section: dict[Section, list[int]] = {s: [] for s in SECTIONS}
    for c, choice in enumerate(choices):
        by_section[choice.section].append(c)
    for members in by_section.values():
        members.sort(key=keys.__getitem__)  # stable: ties keep the given order
    pool = available
    # Reservations, sections by their default priority: a section's share is its own.
    for section in sorted(SECTIONS, key=lambda s: (section_rank.get(s, 3), SECTIONS.index(s))):
        room = min(reserved.get(section, 0), pool)
        blocked: set[int] = set()  # ranks whose contiguous order stopped
        for c in by_section[section]:
            if room <= 0:
                break
            choice = choices[c]
            if choice.rank in blocked:
                continue
            if choice.cost <= room:
                grant = choice.cost
            elif choice.floor <= room:
                grant = room
            else:
                if choice.contiguous:
                    blocked.add(choice.rank)
                continue  # too big even cut: dropped, and smaller ones may still fit
            grants[c] = grant
            room -= grant
            pool -= grant
    # Leftovers, by priority, then section order: partly granted choices grow first.
    # A section's members are sorted by rank first, so each rank is one run of them.
    runs: dict[tuple[int, Section], list[int]] = {}
    for section in SECTIONS:
        for c in by_section[section]:
            runs.setdefault((choices[c].rank, section), []).append(c)
    for rank in (1, 2, 3):
        for section in SECTIONS:
            for c in runs.get((rank, section), ()):
                if pool <= 0:
                    return grants
                choice = choices[c]
                need = choice.cost - grants[c]
                if need == 0:
                    continue
                if need <= pool:
                    grants[c] += need
                    pool -= need
                elif grants[c] > 0 or choice.floor <= pool:
                    grants[c] += pool
                    pool = 0
                elif choice.contiguous:
                    break
    return grants


def cut_required(
    sizes: Sequence[tuple[int, int, bool]], excess: int, marker: int
) -> dict[int, int]:
    """Tokens of text to take off required items so `excess` is gone: the largest first,
    the current turn last. `sizes` holds (item key, text tokens, in the current turn); each
    cut item also gains a `marker` of that many tokens."""
    cuts: dict[int, int] = {}
    for key, tokens, _ in sorted(sizes, key=lambda s: (s[2], -s[1], s[0])):
        if excess <= 0:
            break
        take = min(tokens, excess + marker)
        if take > marker:
            cuts[key] = take
            excess -= take - marker
    return cuts
