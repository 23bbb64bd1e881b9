"""Operator parts: what the operator tagged in system and developer messages, at any priority
above low, kept before conversation history outside the current turn.

The operator's text outranks the history (the contract's trust order), so a block of the
system prompt tagged `memory`, `working_state` or `retrieved_context` takes its room before
the newest turns are pinned (pinned.py): the previous turn is cut before such a block is
dropped. The blocks are kept whole while they fit the room the required parts leave in the
budget, cut to it when their section truncates, and are otherwise left to the grants; when
the previous turn then goes past the budget all the same (it is kept whatever the room), the
blocks left out go too while the window holds them, as they outrank it. A client's summary
(`summary_of`) stands in for a cluster of history and keeps its own rules (clusters.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.planner.budget.cuts import cut_decision, cut_floor
from proxy.planner.budget.grants import MIN_KEPT_TOKENS
from proxy.planner.budget.pinned import apply_pins, pin_turns
from proxy.planner.budget.state import PlanState
from proxy.planner.history import dedupe, may_repeat
from proxy.planner.parts import MESSAGE, Action, Decision, Kind
from proxy.types import Overflow, Priority

OPERATOR = "required (the operator's part)"
_ROLES = ("system", "developer")
_OUTRANKING = (Priority.HIGH, Priority.MEDIUM)
_OWN_RULES = (Kind.SUMMARY, Kind.OPAQUE)


@dataclass(slots=True)
class OperatorParts:
    """The operator's parts still to pin (keys, high before medium, each in the request's
    order), and why a summary among them lost the lines memory holds."""

    keys: list[int]
    deduped: dict[int, str] = field(default_factory=dict)


def pin_first(state: PlanState, rooms: tuple[int, int]) -> int:
    """Pin what goes before the grants in `rooms` (what the required parts leave in the
    budget, and in the window less the answer's reserve): the operator's parts, then the
    newest turns and the opening (pinned.py); the room they take, the opening's
    placeholder included."""
    left, window = rooms
    parts = operator_parts(state)
    # What the previous turn takes at least (pinned with no room: kept all the same), and
    # the marker of the turns left out before it: a part that can be cut leaves it that.
    least = 0
    if parts.keys:
        least = pin_turns(state, (0, window)).taken + state.placeholder_tokens[1]
    ahead, behind = pin_operator_parts(state, parts, left, least)
    turns = pin_turns(state, (left - ahead, window - ahead))
    if behind.keys and ahead + turns.taken > left:
        # The previous turn goes past the budget all the same (it is kept whatever the
        # room): the operator's parts the budget left out come before it in the window.
        more = pin_operator_parts(state, behind, window - ahead)[0]
        if more:
            ahead += more
            turns = pin_turns(state, (left - ahead, window - ahead))
    apply_pins(state, turns)
    return ahead + turns.taken


def operator_parts(state: PlanState) -> OperatorParts:
    """The operator's parts above low priority not decided yet, less those that repeat
    another (by id or content: decided here) and with a summary's lines that memory holds
    taken out: dedupe as the plan would make it, before they are pinned past its reach."""
    layout = state.layout
    role, priority, kind, fields = layout.role, layout.priority, layout.kind, layout.fields
    keys = [
        k
        for k, p in enumerate(priority)
        if p in _OUTRANKING
        and role[k] in _ROLES
        and kind[k] not in _OWN_RULES
        and k not in state.preset
        and not (k in fields and fields[k].summary_of)
    ]
    keys.sort(key=lambda k: (priority[k].rank, k))
    if not keys or not may_repeat(layout):
        return OperatorParts(keys)
    found = dedupe(layout, keys)
    count = state.tokenizer.count_text
    for key, (text, _) in found.rewritten.items():
        state.text[key] = text
        state.cost[key] = max(0, state.cost[key] + count(text) - count(layout.text[key]))
    for key, reason in found.removed.items():
        state.preset[key] = Decision(Action.DEDUPE, reason)
    deduped = {k: why for k, (_, why) in found.rewritten.items()}
    return OperatorParts([k for k in keys if k not in found.removed], deduped)


def pin_operator_parts(
    state: PlanState, parts: OperatorParts, room: int, spare: int = 0
) -> tuple[int, OperatorParts]:
    """Pin `parts` in `room` tokens, in order: whole, or, when their section truncates, cut
    to the room less `spare` (what the previous turn takes at least: a part that can be cut
    leaves it that room in the budget); the tokens they take, and the parts left out."""
    taken, left_out = 0, []
    for key in parts.keys:
        decision = _fitted(state, key, (room - taken, spare), parts.deduped.get(key))
        if decision is None:
            left_out.append(key)
            continue
        state.preset[key] = decision
        state.layout.priority[key] = Priority.REQUIRED
        state.cost[key] = decision.tokens
        if decision.text is not None:
            state.text[key] = decision.text
        taken += decision.tokens
    return taken, OperatorParts(left_out, parts.deduped)


def _fitted(
    state: PlanState, key: int, rooms: tuple[int, int], deduped: str | None
) -> Decision | None:
    """Part `key` in `rooms` (the room, and what a cut leaves of it): kept whole, cut (a
    truncating section), or None."""
    room, spare = rooms
    cost = state.cost[key]
    if cost <= room:
        if deduped is not None:  # kept, its summary lines that memory holds taken out
            return Decision(Action.DEDUPE, deduped, state.text[key], cost)
        return Decision(Action.KEEP, OPERATOR, tokens=cost)
    layout = state.layout
    if state.sections[layout.section[key]].overflow is not Overflow.TRUNCATE:
        return None
    text = state.text_of(key)
    room -= spare
    if cut_floor(state.tokenizer, text, cost, state.marker) > room or room < MIN_KEPT_TOKENS:
        return None
    recall = layout.recall_id(MESSAGE, layout.msg[key])
    cut = cut_decision(state.tokenizer, text, (cost, room), state.marker, recall)
    return Decision(Action.TRUNCATE, f"{OPERATOR}: {cut.reason}", cut.text, cut.tokens)
