"""Clusters: summaries take the place of dropped cluster members; blocks follow their group.

A summary (x_context.summary_of, or a proxy-made one covering a span of messages) is only
a candidate once some member of what it covers is dropped; a summary whose cluster is kept
whole is redundant. Adding a summary takes budget from others, which may drop members of
another cluster, so allocation is repeated until nothing changes (a few rounds at most).

Linear in the request: a summary holds the indexes of the member groups it covers (a named
cluster, or a span of messages), never a copy of their members, and a group's dropped
members are found once per round however many summaries name it (2,000 summaries of one
2,000-member cluster: 3.4 s of settling before).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from heapq import merge

from proxy.planner.budget.grants import Choices
from proxy.planner.parts import Kind, Layout

_ROUNDS = 6


@dataclass(slots=True)
class Substitution:
    granted: tuple[list[int], list[int]] = field(default_factory=lambda: ([], []))  # active, grants
    members: dict[int, tuple[int, ...]] = field(default_factory=dict)  # summary -> its groups
    active: set[int] = field(default_factory=set)  # summaries that are candidates
    excluded: set[int] = field(default_factory=set)  # blocks whose tool group was dropped
    choice_of: dict[int, int] = field(default_factory=dict)  # item key -> choice
    groups: list[list[int]] = field(default_factory=list)  # member items, ascending keys
    lost_of: dict[int, list[int]] = field(default_factory=dict)  # group -> dropped members
    dropped: dict[tuple[int, ...], list[int]] = field(default_factory=dict)  # for these grants
    firsts: dict[tuple[int, ...], int] = field(default_factory=dict)  # for these grants
    given: list[int] | None = None  # the grants as a list, when every choice was active
    _grants: dict[int, int] | None = None

    @property
    def grants(self) -> dict[int, int]:
        """Choice -> tokens granted (active choices only); made when first asked for."""
        if self._grants is None:
            self._grants = dict(zip(*self.granted, strict=True))
        return self._grants

    def lost(self, summary: int) -> list[int]:
        """Members of the summary's clusters that were dropped (ascending keys)."""
        names = self.members[summary]
        if len(names) == 1:
            return self.lost_in(names[0])
        out = self.dropped.get(names)
        if out is None:  # distinct clusters hold distinct items: a merge, no repeats
            out = self.dropped[names] = list(merge(*(self.lost_in(g) for g in names)))
        return out

    def lost_in(self, group: int) -> list[int]:
        """Members of one group that were dropped; found once per round."""
        out = self.lost_of.get(group)
        if out is None:
            grants, choice_of = self.grants, self.choice_of
            out = [k for k in self.groups[group] if grants.get(choice_of[k], 0) == 0]
            self.lost_of[group] = out
        return out

    def anchor(self, summary: int, msg: Sequence[int]) -> int:
        """The first message holding a dropped member of the summary's clusters; once per
        group set, however many summaries name it. The summary must have lost members."""
        names = self.members[summary]
        first = self.firsts.get(names)
        if first is None:
            first = self.firsts[names] = min(msg[k] for k in self.lost(summary))
        return first

    def stand_ins(self, choices: Choices) -> dict[int, int]:
        """Each dropped member -> the summary item standing in for it (the first granted
        active summary covering it, in `active`'s order); each group set looked at once."""
        placed: dict[int, int] = {}
        seen: set[tuple[int, ...]] = set()
        for c in self.active:
            if self.grants.get(c, 0) > 0 and self.members[c] not in seen:
                seen.add(self.members[c])
                for k in self.lost(c):
                    placed.setdefault(k, choices.items[c][0])
        return placed


def find_members(layout: Layout, choices: Choices, sub: Substitution) -> None:
    """Each summary choice -> the member groups it stands for (only summaries with members)."""
    kind, spans, fields, msg, summary = (
        layout.kind,
        layout.spans,
        layout.fields,
        layout.msg,
        Kind.SUMMARY,
    )
    if not fields and not spans:
        return  # no summary of any kind: the common case
    # The summaries first: most requests have none, and then nothing else need be looked at.
    candidates = [
        (c, keys[0])
        for c, keys in enumerate(choices.items)
        if len(keys) == 1
        and (
            (kind[keys[0]] is summary and keys[0] in spans) or layout.fields_of(keys[0]).summary_of
        )
    ]
    if not candidates:
        return
    choice_of = sub.choice_of
    for c, members in enumerate(choices.items):
        for key in members:
            choice_of[key] = c
    keys = sorted(choice_of)
    group_of: dict[str | tuple[int, int], int] = {}
    plain: list[int] = []  # what a span covers: neither a summary nor a proxy-made one
    for key in keys:
        f = layout.fields_of(key)
        if kind[key] is summary or f.summary_of:
            continue
        plain.append(key)
        if f.cluster is not None:
            g = group_of.setdefault(f.cluster, len(sub.groups))
            if g == len(sub.groups):
                sub.groups.append([])
            sub.groups[g].append(key)
    # A cluster whose members are all required (kept whatever the plan) is a group with no
    # member to lose: a summary of it alone is redundant and never stands in.
    for key, f in layout.fields.items():
        if f.cluster is not None and key not in choice_of and f.cluster not in group_of:
            group_of[f.cluster] = len(sub.groups)
            sub.groups.append([])
    by_msg: list[int] = []
    msgs: list[int] = []
    if any(kind[k] is summary for _, k in candidates):  # spans are looked up by message
        by_msg = sorted(plain, key=lambda k: (msg[k], k))
        msgs = [msg[k] for k in by_msg]
    for c, k in candidates:
        summary_of = layout.fields_of(k).summary_of
        if kind[k] is summary and k in spans:
            span = spans[k]
            g = group_of.get(span, -1)
            if g < 0:  # one group per distinct span, shared by every summary of it
                g = group_of[span] = len(sub.groups)
                lo, hi = bisect_left(msgs, span[0]), bisect_left(msgs, span[1])
                sub.groups.append(sorted(by_msg[lo:hi]))
            names: tuple[int, ...] = (g,) if sub.groups[g] else ()
        elif len(summary_of) == 1:
            g = group_of.get(summary_of[0], -1)
            names = (g,) if g >= 0 else ()
        else:
            names = tuple(sorted({group_of[n] for n in summary_of if n in group_of}))
        if names:
            sub.members[c] = names


def settle(layout: Layout, choices: Choices, run: Callable[[list[int]], list[int]]) -> Substitution:
    """Allocate (`run` over the active choice indexes) until summaries and hosts agree."""
    sub = Substitution()
    n = len(choices.rank)
    find_members(layout, choices, sub)  # and each item's choice, when there are summaries
    hosted = (
        [(c, host) for c, host in enumerate(choices.host) if host is not None]
        if not choices.singles
        else []
    )
    for _ in range(_ROUNDS):
        if sub.excluded or sub.members:
            active = [
                c
                for c in range(n)
                if c not in sub.excluded and (c not in sub.members or c in sub.active)
            ]
        else:  # the common case: nothing left out, no summary waiting
            active = list(range(n))
        given = run(active)
        sub.granted, sub._grants = (active, given), None
        sub.given = given if len(active) == n else None
        sub.dropped.clear()  # what was dropped is the new grants' to say
        sub.firsts.clear()
        sub.lost_of.clear()
        changed = False
        for c, host in hosted:  # (hosted: only when blocks sit in tool groups)
            if c in sub.grants and sub.grants.get(host, 0) == 0 and sub.grants[c] > 0:
                sub.excluded.add(c)  # a block cannot outlive the tool group it sits in
                changed = True
        for c, names in sub.members.items():
            if len(names) == 1:
                lost = bool(sub.lost_in(names[0]))
            else:
                lost = any(sub.lost_in(g) for g in names)
            if lost != (c in sub.active):
                (sub.active.add if lost else sub.active.discard)(c)
                changed = True
        if not changed:
            break
    return sub
