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
    items, spans, summary = layout.items, layout.spans, Kind.SUMMARY
    # The summaries first: most requests have none, and then nothing else need be looked at.
    candidates = [
        (c, it)
        for c, choice in enumerate(choices)
        if len(choice.items) == 1
        and (((it := items[choice.items[0]]).kind is summary and it.key in spans) or it.summary_of)
    ]
    if not candidates:
        return {}
    keys = sorted(choice_of)
    clusters: dict[str, list[int]] = {}
    for key in keys:
        it = items[key]
        if it.cluster is not None and not it.summary_of and it.kind is not summary:
            clusters.setdefault(it.cluster, []).append(key)
    out: dict[int, list[int]] = {}
    for c, it in candidates:
        if it.kind is summary and it.key in spans:
            start, end = spans[it.key]
            members = [
                k
                for k in keys
                if start <= items[k].msg < end
                and items[k].kind is not summary
                and not items[k].summary_of
            ]
        else:
            members = sorted({k for name in it.summary_of for k in clusters.get(name, ())})
        if members:
            out[c] = members
    return out


def settle(
    layout: Layout, choices: Sequence[Choice], run: Callable[[list[int]], list[int]]
) -> Substitution:
    """Allocate (`run` over the active choice indexes) until summaries and hosts agree."""
    sub = Substitution()
    choice_of = sub.choice_of
    for c, choice in enumerate(choices):
        for key in choice.items:
            choice_of[key] = c
    sub.members = find_members(layout, choices, choice_of)
    hosted = [(c, choice.host) for c, choice in enumerate(choices) if choice.host is not None]
    for _ in range(_ROUNDS):
        if sub.excluded or sub.members:
            active = [
                c
                for c in range(len(choices))
                if c not in sub.excluded and (c not in sub.members or c in sub.active)
            ]
        else:  # the common case: nothing left out, no summary waiting
            active = list(range(len(choices)))
        sub.grants = dict(zip(active, run(active), strict=True))
        changed = False
        for c, host in hosted:
            if c in sub.grants and sub.grants.get(host, 0) == 0 and sub.grants[c] > 0:
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
