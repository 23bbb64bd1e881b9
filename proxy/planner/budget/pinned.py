"""Pinned: the newest turns, kept with their replies' text; the opening's answer, at least
as a placeholder.

The message the user answers, and what was said just before it, are what the current turn
builds on. Walking back from the current turn, each of the newest `history.keep_recent`
turns (the previous one always) is kept whole while the turns kept so far take at most half
of the room the required parts leave; the turn on that boundary keeps its question and its
reply's head and end around a marker saying how much was cut, when that much fits. Only
the previous turn is kept whatever the room: its question's head if it must be, and its
reply's placeholder when not even a cut of it fits. Turns past the boundary are ranked with
older history (their replies may become placeholders there). The opening (what answered the
setup's question, the setup being always forwarded) keeps at least its placeholder: that is
required, the rest of it is a choice like any reply. What is pinned is required at the size
planned here: a request with no room for it is over its budget on its required parts
(overflow.py), never forwarded with a question missing its answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

from proxy.planner.budget.agent_overflow import head_and_tail
from proxy.planner.budget.grants import MIN_KEPT_TOKENS, cut_required
from proxy.planner.budget.setup_cut import MIN_SETUP_PART
from proxy.planner.budget.state import OPENING, Opening, PlanState, masked
from proxy.planner.budget.turn_choices import mask_of
from proxy.planner.parts import MESSAGE, Action, Decision, Turn, cut_marker
from proxy.types import Priority, Section

PREVIOUS = "required (the previous turn)"
NEWEST = "required (one of the newest turns)"
# The share of the room left by the required parts that the newest turns take at most
# (the contract's "unless together they take more than half of that room").
RECENT_SHARE = 0.5
RECENT = Section.RECENT_MESSAGES
# Tokens of text a cut reply keeps at least, head and end together (plus its marker).
LEAST_TEXT = 2 * MIN_KEPT_TOKENS


def reply_cut_marker(tokens: int, recall: str) -> str:
    return f"\n[…{tokens:,} tokens of this reply cut, recall {recall}…]\n"


@dataclass(slots=True)
class Pinned:
    """The decisions of the pinned items by key (the dropped parts of a masked reply too)."""

    decisions: dict[int, Decision] = field(default_factory=dict)
    # The opening's reply when longer than its placeholder and not pinned with the newest
    # turns: a choice whose placeholder is required (shown whenever it is not granted whole).
    opening: Opening | None = None

    @property
    def tokens(self) -> int:
        """What the pinned parts take (the opening's placeholder apart: the setup's)."""
        return sum(d.tokens for d in self.decisions.values() if d.kept)

    @property
    def taken(self) -> int:
        """What they take of the room, the opening's placeholder included."""
        return self.tokens + (self.opening.mask.tokens if self.opening is not None else 0)


def pin_turns(state: PlanState, rooms: tuple[int, int]) -> Pinned:
    """The pins of the newest turns and the opening of a request whose optional parts have
    `rooms` tokens (in the budget, and in the window less the answer's reserve), not yet
    applied (apply_pins)."""
    return pin(state, state.turns, rooms, state.policy.history.keep_recent)


def apply_pins(state: PlanState, pinned: Pinned) -> int:
    """Make `pinned` the request's: the decisions made, the parts kept required at their
    planned size; the tokens they take."""
    priority, required = state.layout.priority, Priority.REQUIRED
    for key, decision in pinned.decisions.items():
        state.preset[key] = decision
        if decision.kept:
            priority[key] = required
            state.cost[key] = decision.tokens
            if decision.text is not None:
                state.text[key] = decision.text
    state.opening = pinned.opening
    return pinned.tokens


def pin(
    state: PlanState, turns: Sequence[Turn], rooms: tuple[int, int], keep_recent: int
) -> Pinned:
    """The pinned decisions for a request whose optional parts have `rooms` tokens (in
    the budget, and in the window less the answer's reserve)."""
    room, window = rooms
    out = Pinned()
    if not turns:
        return out
    base, cost, section = state.layout.base, state.cost, state.layout.section
    opening = turns[0] if len(turns) > 1 and not turns[0].question and turns[0].reply else None
    answer = [base[i] for i in opening.reply] if opening is not None else []
    mask = mask_of(state, answer) if answer else None
    # What the opening takes at least (whole, or its placeholder) is the setup's.
    opens = min(sum(cost[k] for k in answer), mask.tokens) if mask is not None else 0
    room, window = room - opens, window - opens
    left = math.floor(max(room, 0) * RECENT_SHARE)
    # The conversation's turns: a turn whose parts the client tagged into other sections
    # (memory, retrieved context) is planned by its tags, not by its place.
    spoken = [t for t in turns if any(section[base[i]] is RECENT for i in (*t.question, *t.reply))]
    for place, turn in enumerate(reversed(spoken[-max(keep_recent, 1) :])):  # the previous always
        asked = [base[i] for i in (*turn.question, *turn.attached)] if turn.question else []
        said = [base[i] for i in turn.reply]
        q, r = sum(cost[k] for k in asked), sum(cost[k] for k in said)
        why = PREVIOUS if place == 0 else NEWEST
        if q + r <= left:
            _keep(out, (*asked, *said), cost, why)
            left -= q + r
            continue
        if place == 0:
            # Past half the room, the previous turn may take what is left of it (less a
            # marker of the turns before it, if there are any to omit: the opening never is).
            others = len(turns) - 1 - (opening is not None)
            marker = state.placeholder_tokens[1] if others else 0
            _previous(state, out, (asked, said), left, (room - marker, window - marker))
        elif said and q < left:  # the boundary: its question, its reply's head and end
            cut = _reply_cut(state, said, left - q, why)
            if cut is not None:
                _keep(out, asked, cost, why)
                out.decisions.update(cut)
        break
    if mask is not None and not any(k in out.decisions for k in answer):
        if sum(cost[k] for k in answer) <= mask.tokens:
            _keep(out, answer, cost, OPENING)
        else:
            out.opening = Opening(tuple(answer), mask)
    return out


def _previous(
    state: PlanState,
    out: Pinned,
    turn: tuple[list[int], list[int]],
    half: int,
    rooms: tuple[int, int],
) -> None:
    """The previous turn (its question's and its reply's items) in `half` tokens, kept
    whatever the room: its question (its head when longer), its reply's head and end
    (within the whole `room` when half of it holds too little, at least a little of each
    when not even that fits)."""
    cost = state.cost
    asked, said = turn
    room, window = rooms
    q = sum(cost[k] for k in asked)
    mask = mask_of(state, said) if said else None
    # What the reply's least readable cut costs, at most: its placeholder's line and a
    # little of its text at each end.
    least = 0 if mask is None else min(sum(cost[k] for k in said), mask.tokens + LEAST_TEXT)
    excess = q + least - half
    if excess > 0 and q > MIN_SETUP_PART:  # a question longer than the room: its head
        out.decisions.update(_cut(state, asked, min(excess, q - MIN_SETUP_PART)))
    else:
        _keep(out, asked, cost, PREVIOUS)
    if mask is None:
        return
    kept = sum(out.decisions[k].tokens for k in asked)
    cut = _reply_cut(state, said, max(half - kept, min(room - kept, least)), PREVIOUS)
    if cut is None and least <= window - kept:
        # Not even that fits the room: the least of its text all the same (a required
        # part: over the budget, the required parts go alone within the window), never a
        # placeholder; one only where the window holds not even that.
        cut = _reply_cut(state, said, least, PREVIOUS)
    out.decisions.update(cut if cut is not None else masked(said, mask, PREVIOUS))


def _keep(out: Pinned, keys: Sequence[int], cost: list[int], why: str) -> None:
    for k in keys:
        out.decisions[k] = Decision(Action.KEEP, why, tokens=cost[k])


def _cut(state: PlanState, keys: list[int], excess: int) -> dict[int, Decision]:
    """The previous question's items cut by `excess` tokens in all (the largest first)."""
    count, text_of, marker = state.tokenizer.count_text, state.text_of, state.marker
    cuts = cut_required([(k, count(text_of(k)), 0) for k in keys if text_of(k)], excess, marker)
    out: dict[int, Decision] = {}
    for k in keys:
        take = cuts.get(k, 0)
        if not take:
            out[k] = Decision(Action.KEEP, PREVIOUS, tokens=state.cost[k])
            continue
        text = text_of(k)
        kept = state.tokenizer.truncate_text(text, count(text) - take)
        tokens = state.cost[k] - take + marker
        mark = cut_marker(state.layout.recall_id(MESSAGE, state.layout.msg[k]))
        out[k] = Decision(Action.TRUNCATE, f"{PREVIOUS}: cut", kept + mark, tokens)
    return out


def _reply_cut(
    state: PlanState, keys: list[int], room: int, why: str
) -> dict[int, Decision] | None:
    """A reply of items `keys` in `room` tokens: whole when it fits; else its largest item
    cut to its head and end around a marker saying how much was cut, the others whole; or,
    when they leave too little, its last item (its final answer) so cut alone. None when
    not MIN_KEPT_TOKENS of its text fit."""
    cost = state.cost
    if sum(cost[k] for k in keys) <= room:
        return {k: Decision(Action.KEEP, why, tokens=cost[k]) for k in keys}
    largest = max(keys, key=lambda k: (cost[k], -k))
    ways = [(largest, [k for k in keys if k != largest])]
    if len(keys) > 1:
        ways.append((keys[-1], []))
    for item, whole in ways:
        cut = _cut_to(state, item, room - sum(cost[k] for k in whole))
        if cut is not None:
            out = {k: Decision(Action.DROP, f"{why}: reply cut") for k in keys}
            out.update({k: Decision(Action.KEEP, why, tokens=cost[k]) for k in whole})
            out[item] = Decision(Action.TRUNCATE, f"{why}: reply cut", cut[0], cut[1])
            return out
    return None


def _cut_to(state: PlanState, key: int, room: int) -> tuple[str, int] | None:
    """Item `key`'s text cut to its head and end so the item costs at most `room` tokens,
    and what it costs then; None when not MIN_KEPT_TOKENS of its text fit."""
    tokenizer, count = state.tokenizer, state.tokenizer.count_text
    text = state.text_of(key)
    tokens = count(text)
    framing = state.cost[key] - tokens  # the message's own overhead
    recall = state.layout.recall_id(MESSAGE, state.layout.msg[key])
    keep = room - framing - count(reply_cut_marker(tokens, recall))
    while keep >= MIN_KEPT_TOKENS:
        cut = head_and_tail(tokenizer, text, keep, partial(reply_cut_marker, recall=recall), "")
        after = framing + count(cut)
        if after <= room:
            return cut, after
        keep -= after - room
    return None
