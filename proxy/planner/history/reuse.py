"""Reuse: how many of a unit's result ids the conversation went on to use.

A tool result whose ids came back later (in a call's arguments, an answer, the user's
words: a reservation looked up and then changed, a flight searched and then booked) holds
state the next step is likely to work on; a result nothing ever referred to again is
likelier a dead end. Counted for units that hold results (tool exchanges, a text agent's
steps), from the request alone: later results are not read (an id listed again in
another lookup is no use of it), and the ids of every text come from the term index,
which remembers them from one request to the next.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.planner.history.rank import REUSE_CAP
from proxy.planner.parts import Layout, command_text
from proxy.relevance import TermIndex

_RESULTS = ("tool", "function")


def reused(layout: Layout, units: Sequence[tuple[int, ...]], index: TermIndex) -> list[int]:
    """Per unit (its item keys), its results' ids found in a later call or spoken message
    (at most REUSE_CAP); 0 for a unit without results."""
    role, msg, text, roles = layout.role, layout.msg, layout.text, layout.roles
    held: list[frozenset[str]] = []
    for keys in units:
        found: frozenset[str] = frozenset()
        if len(keys) > 1:
            for k in keys:
                if role[k] in _RESULTS and text[k]:
                    found |= index.ids(text[k])
        held.append(found)
    wanted = frozenset().union(*held) if held else frozenset()
    if not wanted:
        return [0] * len(units)
    first = min(msg[keys[0]] for keys, ids in zip(units, held, strict=True) if ids)
    last_seen: dict[str, int] = {}
    for i in range(first + 1, len(layout.stripped)):
        if roles[i] in _RESULTS:
            continue
        said = index.ids(text[layout.base[i]])
        command = command_text(layout, i)
        for again in (said | index.ids(command) if command else said) & wanted:
            last_seen[again] = i
    out = []
    for keys, ids in zip(units, held, strict=True):
        last = msg[keys[-1]]
        out.append(min(REUSE_CAP, sum(1 for x in ids if last_seen.get(x, -1) > last)))
    return out
