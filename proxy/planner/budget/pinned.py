"""Pinned: the turn before the current one, always kept, cut if it must be; the opening's
answer, at least as a placeholder.

The message the user answers, and what they asked before it, are what the current turn
builds on: the previous turn is a required part, planned before anything optional in at
most a fifth of the room the required parts leave (in the newest turns' room): whole when it
fits; else its reply keeps its head with a marker saying how much was cut, or, when not
even that fits, a one-line placeholder stands in its place; a question longer than that
room keeps its head. The opening (what answered the setup's question, the setup being
always forwarded) keeps at least its placeholder: that is required, the rest of it is a
choice like any reply. Both are required at the size planned here: a request with no room
for them is over its budget on its required parts (overflow.py), never forwarded with a
question missing its answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from proxy.planner.budget.grants import MIN_KEPT_TOKENS, cut_required
from proxy.planner.budget.placeholders import Mask
from proxy.planner.budget.setup_cut import MIN_SETUP_PART
from proxy.planner.budget.state import OPENING, Opening, PlanState, masked
from proxy.planner.budget.turn_choices import mask_of
from proxy.planner.parts import MARKER, Action, Decision, Turn
from proxy.types import Priority

PREVIOUS = "required (the previous turn)"
# The share of the room left by the required parts that the previous turn takes at most
# (the newest turns' room, allocation.RECENT_SHARE, holds it).
PREVIOUS_SHARE = 0.2


def reply_cut_marker(tokens: int) -> str:
    return f"\n[…{tokens:,} tokens of this reply cut]"


@dataclass(slots=True)
class Pinned:
    """The decisions of the pinned items by key (the dropped parts of a masked reply too),
    and the tokens the previous turn takes."""

    decisions: dict[int, Decision] = field(default_factory=dict)
    previous: int = 0
    # The opening's reply when longer than its placeholder: a choice whose placeholder is
    # required (shown whenever the reply is not granted whole).
    opening: Opening | None = None


def pin_turns(state: PlanState, room: int) -> int:
    """Pin the previous turn and the opening of a request whose optional parts have `room`
    tokens: their decisions made, the parts kept required at their planned size; the
    tokens the previous turn takes."""
    pinned = pin(state, state.turns, room)
    priority, required = state.layout.priority, Priority.REQUIRED
    for key, decision in pinned.decisions.items():
        state.preset[key] = decision
        if decision.kept:
            priority[key] = required
            state.cost[key] = decision.tokens
            if decision.text is not None:
                state.text[key] = decision.text
    state.opening = pinned.opening
    return pinned.previous


def pin(state: PlanState, turns: Sequence[Turn], room: int) -> Pinned:
    """The pinned decisions for a request whose optional parts have `room` tokens."""
    out = Pinned()
    if not turns:
        return out
    base, cost = state.layout.base, state.cost
    previous = turns[-1]
    cap = math.floor(max(room, 0) * PREVIOUS_SHARE)
    asked = [base[i] for i in (*previous.question, *previous.attached)]
    said = [base[i] for i in previous.reply]
    q, r = sum(cost[k] for k in asked), sum(cost[k] for k in said)
    if q + r <= cap:
        _keep(out, (*asked, *said), cost, PREVIOUS)
    else:
        mask = mask_of(state, said) if said else None
        masked = mask.tokens if mask is not None else 0
        excess = q + masked - cap
        if excess > 0 and q > MIN_SETUP_PART:  # a question longer than the room: its head
            out.decisions.update(_cut(state, asked, min(excess, q - MIN_SETUP_PART)))
        else:
            _keep(out, asked, cost, PREVIOUS)
        if mask is not None:
            kept = sum(out.decisions[k].tokens for k in asked)
            out.decisions.update(_reply(state, said, cap - kept, mask))
    out.previous = sum(d.tokens for d in out.decisions.values())
    opening = turns[0]
    if len(turns) > 1 and not opening.question and opening.reply:
        said = [base[i] for i in opening.reply]
        mask = mask_of(state, said)
        if sum(cost[k] for k in said) <= mask.tokens:
            _keep(out, said, cost, OPENING)
        else:
            out.opening = Opening(tuple(said), mask)
    return out


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
        out[k] = Decision(Action.TRUNCATE, f"{PREVIOUS}: cut", kept + MARKER, tokens)
    return out


def _reply(state: PlanState, keys: list[int], room: int, mask: Mask) -> dict[int, Decision]:
    """The previous reply in `room` tokens: its head, the rest cut with a marker saying how
    much; its placeholder when not even MIN_KEPT_TOKENS of it fit."""
    count, cost = state.tokenizer.count_text, state.cost
    out: dict[int, Decision] = {}
    left = room
    for n, k in enumerate(keys):
        if cost[k] <= left:
            out[k] = Decision(Action.KEEP, PREVIOUS, tokens=cost[k])
            left -= cost[k]
            continue
        text = state.text_of(k)
        tokens = count(text)
        later = sum(cost[j] for j in keys[n + 1 :])
        marker = count(reply_cut_marker(tokens + later))
        want = left - (cost[k] - tokens) - marker
        if want < MIN_KEPT_TOKENS:
            break
        kept = state.tokenizer.truncate_text(text, want)
        text = kept + reply_cut_marker(tokens - count(kept) + later)
        out[k] = Decision(Action.TRUNCATE, f"{PREVIOUS}: reply cut", text, left)
        for j in keys[n + 1 :]:
            out[j] = Decision(Action.DROP, f"{PREVIOUS}: reply cut")
        return out
    if len(out) == len(keys):
        return out
    return masked(keys, mask, PREVIOUS)  # not even its head fits: its placeholder
