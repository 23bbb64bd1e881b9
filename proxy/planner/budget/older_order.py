"""Older history's keep order: the newest turns up to their room (the rest join the older
history), then the older history by what the request is doing now (history/rank.py)."""

from __future__ import annotations

from itertools import compress

from proxy.planner.budget.grants import Choices
from proxy.planner.budget.state import PlanState
from proxy.planner.history import keep_order, merits, now_of, per_token, reused
from proxy.types import Priority, Section

_TOOL_ROLES = ("tool", "function")

# The newest two of the newest turns (the message the user answers, and what it answered)
# hold up to this many times the room the others share: what the user replies to stays,
# even when long (a list of options); on tau-airline it is forwarded in 71% of trimmed
# requests (46% without).
NEWEST_FACTOR = 2.5
NEWEST_UNITS = 2


def cap_recent(state: PlanState, choices: Choices) -> None:
    """The newest turns (high priority recent_messages, kept newest first) hold at most
    `state.recent_room` tokens: the rest of them join the older history, ranked with it.
    On a small budget a run of recent turns would otherwise take all the room the
    required parts leave, and nothing older could be kept for what the request needs
    (tau-airline at 2,800 tokens: evidence recall 0.31 with the run uncapped, 0.43
    capped at a quarter of that room, with the ranking below)."""
    room, rank, section = state.recent_room, choices.rank, choices.section
    if room is None:
        return
    high, recent, low = Priority.HIGH.rank, Section.RECENT_MESSAGES, Priority.LOW.rank
    runs = [c for c in range(len(rank)) if rank[c] == high and section[c] is recent]
    used = 0
    moved = False
    msg, items = state.layout.msg, choices.items
    for n, c in enumerate(sorted(runs, key=lambda c: -msg[items[c][0]])):  # the newest first
        used += choices.cost[c]
        if used > (room if n >= NEWEST_UNITS else room * NEWEST_FACTOR):
            rank[c] = low
            moved = True
    if moved and choices.keep is not None:  # keep order: by rank, newest first within one
        choices.keep.sort(key=rank.__getitem__)
        choices.keep_ranks = [rank[c] for c in choices.keep]


def order_older(state: PlanState, choices: Choices) -> None:
    """Older history (low priority recent_messages) in keep order by what the request is
    doing now (history/rank.py), if relevance is on."""
    cap_recent(state, choices)
    history = state.policy.history
    if history.relevance != "bm25":
        return
    section, low = Section.RECENT_MESSAGES, Priority.LOW.rank
    if choices.keep is not None:  # one section: the low ones, if it is recent_messages
        older = []
        if choices.section and choices.section[0] is section:
            older = list(compress(range(len(choices.rank)), map(low.__eq__, choices.rank)))
    else:
        older = [
            c
            for c, (s, r) in enumerate(zip(choices.section, choices.rank, strict=True))
            if s is section and r == low
        ]
    if not older:
        return
    known = state.older_merits
    if known is not None and known[0] == tuple(older):
        merit, positions = known[1], known[2]
    else:
        texts, positions, groups = _older_texts(state, choices, older)
        layout, items = state.layout, choices.items
        reuse = (
            reused(layout, [items[c] for c in older], state.terms) if groups else [0] * len(older)
        )
        merit = merits(texts, reuse, now_of(layout), state.terms)
        state.older_merits = tuple(older), merit, positions
    costs = [choices.cost[c] for c in older]
    values = per_token(merit, costs)
    sequence = keep_order(values, positions, history.neighbors)
    contiguous, keep = choices.contiguous, choices.keep
    for c in older:
        contiguous[c] = False
    if keep is not None:  # one section (recent_messages): its low run is the sequence
        first = next(p for p, c in enumerate(keep) if choices.rank[c] == low)
        keep[first : first + len(older)] = [older[j] for j in sequence]
        return
    rank = [0] * len(sequence)  # each older choice's place in the sequence
    for r, j in enumerate(sequence):
        rank[j] = r
    order = choices.order
    for c, r in zip(older, rank, strict=True):
        order[c] = (float(r),)


def _older_texts(
    state: PlanState, choices: Choices, older: list[int]
) -> tuple[list[str], list[int], bool]:
    """The older units' texts as ranked, their positions, and whether any is a group."""
    layout, text = state.layout, state.text
    texts_of, msg = layout.text, layout.msg
    # An agent's loop (its history holds exchanges): a lone message (a malformed reply, a
    # format reminder, a remark between calls) names what the results hold without holding
    # it, and is ranked after the units that match, newest first (agent runs at 16k,
    # evidence recall 0.67 -> 0.73; tau-airline at 2,800 0.37 -> 0.43).
    loop = bool(layout.agent)
    texts: list[str] = []
    positions: list[int] = []
    groups = False
    if choices.lead is not None and not text and not loop:  # each a message, as it came
        leads = list(map(choices.lead.__getitem__, older)) if choices.lead else []
        texts, positions = list(map(texts_of.__getitem__, leads)), list(map(msg.__getitem__, leads))
        older_texts: list[int] = []
    else:
        older_texts = older
    items = choices.items if older_texts else []
    for c in older_texts:  # runs per older unit: text_of inlined
        keys = items[c]
        if len(keys) == 1:
            k = keys[0]
            texts.append("" if loop else (text[k] if k in text else texts_of[k]))
        else:  # a tool exchange or a step: what its results hold (a cleared one, as it came)
            groups = True
            texts.append(" ".join(texts_of[k] for k in keys if layout.role[k] in _TOOL_ROLES))
        positions.append(msg[keys[0]])
    return texts, positions, groups
