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
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from proxy.planner.budget.placeholders import Mask
from proxy.types import Section

SECTIONS = tuple(Section)  # the contract's order: ties between sections follow it
_LEFTOVER_RANKS = (1, 2, 3)  # high, medium, low: a proxy-made summary (4) gets none
# A client's summary (x_context summary_of): no reservation, only what is left once every
# other choice had its turn, so that sending summaries never costs the turns their room.
LAST_RANK = 5
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


def reservations(
    budget: int, ratios: Mapping[Section, float], required: Mapping[Section, int]
) -> dict[Section, int]:
    """Each section's floor(B * ratio), less what its required items already take."""
    return {
        s: max(0, math.floor(budget * ratios.get(s, 0.0)) - required.get(s, 0)) for s in SECTIONS
    }


@dataclass(slots=True)
class Choices:
    """The planner's choices as parallel lists (choice c: items[c], section[c], ...)."""

    made_items: list[tuple[int, ...]] | None = None  # see `items`
    section: list[Section] = field(default_factory=list)
    rank: list[int] = field(default_factory=list)
    order: list[tuple[float, ...]] = field(default_factory=list)
    cost: list[int] = field(default_factory=list)
    floor: list[int] = field(default_factory=list)
    host: list[int | None] = field(default_factory=list)
    cut: list[int | None] = field(default_factory=list)
    contiguous: list[bool] = field(default_factory=list)
    # Every choice in keep order (by rank, then order) when all are of one section: known
    # from how they were made, so allocation needs no sort (and `order` is left empty).
    # None: sort them by rank and order.
    keep: list[int] | None = None
    singles: bool = False  # every choice one item, none hosted (each message its own)
    lead: list[int] | None = None  # when `singles`: each choice's item
    keep_ranks: list[int] | None = None  # with `keep`: the ranks along it (ascending)
    # A turn's reply (turn_choices.py): its placeholder when not granted beside its question.
    mask: dict[int, Mask] = field(default_factory=dict)

    @property
    def items(self) -> list[tuple[int, ...]]:
        """Each choice's items; for `singles`, made from `lead` when first read (a long
        chat's plan rarely reads them)."""
        if self.made_items is None:
            self.made_items = list(zip(self.lead, strict=True)) if self.lead is not None else []
        return self.made_items

    def add(self, choice: Choice) -> None:
        self.items.append(choice.items)
        self.section.append(choice.section)
        self.rank.append(choice.rank)
        self.order.append(choice.order)
        self.cost.append(choice.cost)
        self.floor.append(choice.floor)
        self.host.append(choice.host)
        self.cut.append(choice.cut)
        self.contiguous.append(choice.contiguous)


def allocate(
    choices: Sequence[Choice],
    available: int,
    reserved: Mapping[Section, int],
    section_rank: Mapping[Section, int],
) -> list[int]:
    """Tokens granted to each choice: its cost (kept), less (cut to that), or 0 (dropped)."""
    columns = Choices()
    for choice in choices:
        columns.add(choice)
    return grant(columns, range(len(choices)), available, reserved, section_rank)


def grant(
    choices: Choices,
    active: Sequence[int],
    available: int,
    reserved: Mapping[Section, int],
    section_rank: Mapping[Section, int],
) -> list[int]:
    """allocate for the `active` choices (indexes into `choices`): one grant each, in order."""
    every = len(active) == len(choices.rank)
    host: Sequence[int | None]
    if every:  # every choice (active is ascending): p is c
        rank, section = choices.rank, choices.section
        cost, floor, contiguous = choices.cost, choices.floor, choices.contiguous
        host = choices.host
    else:
        rank = [choices.rank[c] for c in active]
        section = [choices.section[c] for c in active]
        cost = [choices.cost[c] for c in active]
        floor = [choices.floor[c] for c in active]
        contiguous = [choices.contiguous[c] for c in active]
        at = {c: p for p, c in enumerate(active)}
        # A host that is not active is never granted: what it hosts is not either.
        host = [None if h is None else at.get(h, -1) for h in map(choices.host.__getitem__, active)]
    n = len(rank)
    keep = choices.keep
    if keep is not None and every and n:  # one section in a known order: the lean case
        ranks = choices.keep_ranks or list(map(rank.__getitem__, keep))
        runs_of = [
            (r, keep[bisect_left(ranks, r) : bisect_right(ranks, r)]) for r in sorted(set(ranks))
        ]
        room = reserved.get(section[0], 0)
        leftover = [run for r, run in runs_of if r in _LEFTOVER_RANKS]
        leftover += [run for r, run in runs_of if r == LAST_RANK]
        reserve = [run for r, run in runs_of if r != LAST_RANK]
        columns = (cost, floor, contiguous, host)
        return _grant_runs([(room, reserve)], leftover, columns, available)
    by_section: dict[Section, list[int]] = {s: [] for s in SECTIONS}
    if keep is not None and n:  # one section, its keep order known
        if not every:  # the active ones in the same order
            place = [0] * len(keep)
            for i, c in enumerate(keep):
                place[c] = i
            keep = sorted(range(n), key=lambda p: place[active[p]])
        by_section[section[0]] = keep
    elif n:
        order = choices.order if every else [choices.order[c] for c in active]
        present = set(section)
        if len(present) == 1:
            by_section[present.pop()] = list(range(n))
        else:
            for p, s in enumerate(section):
                by_section[s].append(p)
        keys = list(zip(rank, order, strict=True))
        for members in by_section.values():
            members.sort(key=keys.__getitem__)  # stable: ties keep the given order
    # A section's members are sorted by rank first, so each rank is one run of them.
    runs: dict[tuple[int, Section], list[int]] = {}
    section_runs: dict[Section, list[list[int]]] = {}
    for s in SECTIONS:
        members = by_section[s]
        if not members:
            continue
        ranks = list(map(rank.__getitem__, members))
        section_runs[s] = []
        for r in sorted(set(ranks)):
            run = runs[(r, s)] = members[bisect_left(ranks, r) : bisect_right(ranks, r)]
            if r != LAST_RANK:
                section_runs[s].append(run)
    # Reservations, sections by their default priority: a section's share is its own.
    by_priority = sorted(section_runs, key=lambda s: (section_rank.get(s, 3), SECTIONS.index(s)))
    reservation = [(reserved.get(s, 0), section_runs[s]) for s in by_priority]
    # Leftovers, by priority, then section order: partly granted choices grow first.
    leftover = [
        runs[(r, s)] for r in (*_LEFTOVER_RANKS, LAST_RANK) for s in SECTIONS if (r, s) in runs
    ]
    return _grant_runs(reservation, leftover, (cost, floor, contiguous, host), available)


def _grant_runs(
    reservation: list[tuple[int, list[list[int]]]],
    leftover: list[list[int]],
    columns: tuple[Sequence[int], Sequence[int], Sequence[bool], Sequence[int | None]],
    available: int,
) -> list[int]:
    """The two passes of `grant`: each section's reservation over its runs (each rank's
    choices in keep order), then what is left over the runs in `leftover`'s order. A
    hosted choice is granted only once its host is (-1: a host that never is)."""
    cost, floor, contiguous, host = columns
    grants = [0] * len(cost)
    hosted = host.count(None) != len(host)
    pool = available
    for reserved, section in reservation:
        room = min(reserved, pool)
        for run in section:
            if room <= 0:
                break
            for p in run:
                if room <= 0:
                    break
                if hosted and (h := host[p]) is not None and (h < 0 or not grants[h]):
                    continue
                need = cost[p]
                if need <= room:
                    grants[p] = need
                    room -= need
                    pool -= need
                elif floor[p] <= room:
                    grants[p] = room
                    pool -= room
                    room = 0
                elif contiguous[p]:
                    break  # a contiguous order stopped: the rest of its rank waits
    for run in leftover:
        for p in run:
            if pool <= 0:
                return grants
            need = cost[p] - grants[p]
            if need == 0:
                continue
            if hosted and (h := host[p]) is not None and (h < 0 or not grants[h]):
                continue
            if need <= pool:
                grants[p] = cost[p]
                pool -= need
            elif grants[p] > 0 or floor[p] <= pool:
                grants[p] += pool
                pool = 0
            elif contiguous[p]:
                break
    return grants


def cut_required(sizes: Sequence[tuple[int, int, int]], excess: int, marker: int) -> dict[int, int]:
    """Tokens of text to take off required items so `excess` is gone: by rank (lowest
    first), the largest first within one. `sizes` holds (item key, text tokens, rank: 0,
    or 1 for the current turn, 2 for the operator's text); each cut item also gains a
    `marker` of that many tokens."""
    cuts: dict[int, int] = {}
    for key, tokens, _ in sorted(sizes, key=lambda s: (s[2], -s[1], s[0])):
        if excess <= 0:
            break
        take = min(tokens, excess + marker)
        if take > marker:
            cuts[key] = take
            excess -= take - marker
    return cuts
