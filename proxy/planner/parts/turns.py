"""Turns: a conversation's history read as the units a model needs whole.

A turn is a question (a user message) and what follows it up to the next question:
its reply (the plain assistant messages) and the tool exchanges between. What follows the
setup before the first question answers the setup's own question (the opening: a turn
whose question is the setup's, always kept). A turn is kept whole, kept with its reply cut
or replaced by a placeholder, or dropped whole; never a question without its reply, never
a reply or an exchange without its question.

Only the history's untagged parts are read as turns (between the setup and the current
turn, default-tagged recent_messages, optional): a part the client tagged (memory, a
summary) is planned by its tag, and the system prompt stays where it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.planner.parts.groups import Singles
from proxy.planner.parts.items import Layout
from proxy.types import Priority, Section

_TURN_TAGS = frozenset(("default", "agent history"))
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
    if isinstance(layout.units, Singles) and not layout.split:
        return _plain_turns(layout, start, end)
    roles, base, units, unit_of = layout.roles, layout.base, layout.units, layout.unit_of
    section, priority, tag, stripped = layout.section, layout.priority, layout.tag, layout.stripped
    recent, required = Section.RECENT_MESSAGES, Priority.REQUIRED

    def eligible(i: int) -> bool:
        k = base[i]
        return section[k] is recent and priority[k] is not required and tag[k] in _TURN_TAGS

    turns: list[Turn] = []
    turn: Turn | None = None
    for i in range(start, end):
        unit = units[unit_of[i]]
        if len(unit) > 1:  # a tool exchange (a call and its results, or a text step)
            if unit[0] != i:
                continue
            if all(eligible(j) for j in unit):
                if turn is None:
                    turn = Turn()
                    turns.append(turn)
                turn.exchanges.append(unit_of[i])
            continue
        if not eligible(i):
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
    """history_turns for a chat of messages each a unit and an item of its own (a long
    plain chat: this runs per request)."""
    roles, plain, tag, priority = layout.roles, layout.plain, layout.tag, layout.priority
    required = Priority.REQUIRED
    turns: list[Turn] = []
    turn: Turn | None = None
    for i in range(start, end):
        role = roles[i]
        if role == "user":
            if tag[i] in _TURN_TAGS and priority[i] is not required:
                turn = Turn([i])
                turns.append(turn)
            continue
        if role in _OPERATOR or tag[i] not in _TURN_TAGS or priority[i] is required:
            continue
        if turn is None:
            turn = Turn()
            turns.append(turn)
        if role == "assistant" and plain[i]:
            turn.reply.append(i)
        else:
            turn.attached.append(i)
    return turns
