"""Turns: a conversation's history read as the units a model needs whole.

A turn is a question (a user message) and what follows it up to the next question:
its reply (the plain assistant messages) and the tool exchanges between. What follows the
setup before the first question answers the setup's own question (the opening: a turn
whose question is the setup's, always kept). A turn is kept whole, kept with its reply cut
or replaced by a placeholder, or dropped whole; never a question without its reply, never
a reply or an exchange without its question.

Turns are read from roles, tagged or not (a tag sets a part's section and priority, never
the turn it belongs to): a user message is a question, a plain assistant message a reply.
A system or developer message in the history (a summary, a memory the operator placed
there) is a part of its own, and so is a summary a client sent in any role (it stands in
for the turns it covers). Only required parts are outside every turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.planner.parts.groups import Singles
from proxy.planner.parts.items import Layout
from proxy.types import Priority

_OPERATOR = frozenset(("system", "developer"))
_CALLS = ("tool_calls", "function_call")


@dataclass(slots=True)
class Turn:
    question: list[int] = field(default_factory=list)  # its user message; empty: the opening
    reply: list[int] = field(default_factory=list)  # its plain assistant messages
    exchanges: list[int] = field(default_factory=list)  # unit indexes of its tool exchanges
    attached: list[int] = field(default_factory=list)  # other messages: with the question

    @property
    def start(self) -> int:
        """The turn's first message (where a marker for it would go)."""
        firsts = [*self.question[:1], *self.reply[:1], *self.attached[:1]]
        return min(firsts) if firsts else -1


def history_turns(layout: Layout) -> list[Turn]:
    """The history's turns, oldest first (empty when it holds no turn)."""
    start, end = layout.setup_end, layout.current_start
    if end <= start:
        return []
    if isinstance(layout.units, Singles) and not layout.split and not layout.fields:
        return _plain_turns(layout, start, end)
    roles, base, units, unit_of = layout.roles, layout.base, layout.units, layout.unit_of
    priority, stripped, fields = layout.priority, layout.stripped, layout.fields
    required = Priority.REQUIRED

    def own_part(i: int) -> bool:  # a part of its own, in no turn
        k = base[i]
        return (
            roles[i] in _OPERATOR
            or priority[k] is required
            or (k in fields and bool(fields[k].summary_of))
        )

    turns: list[Turn] = []
    turn: Turn | None = None
    for i in range(start, end):
        unit = units[unit_of[i]]
        if len(unit) > 1:  # a tool exchange (a call and its results, or a text step)
            if unit[0] != i:
                continue
            if not any(own_part(j) for j in unit):
                if turn is None:
                    turn = Turn()
                    turns.append(turn)
                turn.exchanges.append(unit_of[i])
            continue
        if own_part(i):
            continue
        role = roles[i]
        if role == "user":
            turn = Turn([i])
            turns.append(turn)
            continue
        if turn is None:
            turn = Turn()
            turns.append(turn)
        m = stripped[i]
        if role == "assistant" and type(m) is dict and not any(m.get(c) for c in _CALLS):
            turn.reply.append(i)
        else:
            turn.attached.append(i)
    return turns


def _plain_turns(layout: Layout, start: int, end: int) -> list[Turn]:
    """history_turns for a chat of messages each a unit and an item of its own, none with
    tag fields (a long plain chat: this runs per request)."""
    roles, plain, priority = layout.roles, layout.plain, layout.priority
    required = Priority.REQUIRED
    turns: list[Turn] = []
    turn: Turn | None = None
    for i in range(start, end):
        role = roles[i]
        if role in _OPERATOR or priority[i] is required:
            continue
        if role == "user":
            turn = Turn([i])
            turns.append(turn)
            continue
        if turn is None:
            turn = Turn()
            turns.append(turn)
        if role == "assistant" and plain[i]:
            turn.reply.append(i)
        else:
            turn.attached.append(i)
    return turns
