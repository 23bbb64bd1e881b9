"""Clusters: summaries take the place of dropped cluster members; blocks follow their group.

A summary (x_context.summary_of, or a proxy-made one covering a span of messages) is only
a candidate once some member of what it covers is dropped; a summary whose cluster is kept
whole is redundant. Adding a summary takes budget from others, which may drop members of
another cluster, so allocation is repeated until nothing changes (a few rounds at most).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from proxy.budget import Choice
from proxy.items import Kind, Layout

_ROUNDS = 6


@dataclass(slots=True)
class Substitution:
    grants: dict[int, int] = field(default_factory=dict)  # choice -> tokens granted
    members: dict[int, list[int]] = field(default_factory=dict)  # summary choice -> member items
    active: set[int] = field(default_factory=set)  # summaries that are candidates
    excluded: set[int] = field(default_factory=set)  # blocks whose tool group was dropped
    choice_of: dict[int, int] = field(default_factory=dict)  # item key -> choice

    def lost(self, summary: int) -> list[int]:
        """Members of the summary's cluster that were dropped."""
        return [k for k in self.members[summary] if self.grants.get(self.choice_of[k], 0) == 0]


def find_members(
    layout: Layout, choices: Sequence[Choice], choice_of: dict[int, int]
) -> dict[int, list[int]]:
    """Each summary choice -> the optional items it stands for (only summaries with some)."""
    items = layout.items
    clusters: dict[str, list[int]] = {}
    for key in sorted(choice_of):
        it = items[key]
        if it.cluster is not None and not it.summary_of and it.kind is not Kind.SUMMARY:
            clusters.setdefault(it.cluster, []).append(key)
    out: dict[int, list[int]] = {}
    for c, choice in enumerate(choices):
        if len(choice.items) != 1:
            continue
        it = items[choice.items[0]]
        if it.kind is Kind.SUMMARY and it.key in layout.spans:
            start, end = layout.spans[it.key]
            members = [
                k
                for k in sorted(choice_of)
                if start <= items[k].msg < end
                and items[k].kind is not Kind.SUMMARY
                and not items[k].summary_of
            ]
        elif it.summary_of:
            members = sorted({k for name in it.summary_of for k in clusters.get(name, ())})
        else:
            continue
        if members:
            out[c] = members
    return out


def settle(
    layout: Layout, choices: Sequence[Choice], run: Callable[[list[int]], list[int]]
) -> Substitution:
    """Allocate (`run` over the active choice indexes) until summaries and hosts agree."""
    sub = Substitution()
    for c, choice in enumerate(choices):
        for key in choice.items:
            sub.choice_of[key] = c
    sub.members = find_members(layout, choices, sub.choice_of)
    for _ in range(_ROUNDS):
        active = [
            c
            for c in range(len(choices))
            if c not in sub.excluded and (c not in sub.members or c in sub.active)
        ]
        sub.grants = dict(zip(active, run(active), strict=True))
        changed = False
        for c in active:
            host = choices[c].host
            if host is not None and sub.grants.get(host, 0) == 0 and sub.grants[c] > 0:
                sub.excluded.add(c)  # a block cannot outlive the tool group it sits in
                changed = True
        for c in sub.members:
            lost = bool(sub.lost(c))
            if lost != (c in sub.active):
                (sub.active.add if lost else sub.active.discard)(c)
                changed = True
        if not changed:
            break
    return sub
