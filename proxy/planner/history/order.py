"""History order: which older turns to keep first — by relevance to the current turn, or recency."""

from __future__ import annotations

import operator
from itertools import compress, repeat

from proxy.planner.history.rank import Now
from proxy.planner.parts import Kind, Layout, command_text
from proxy.types import Priority, Section

# Messages just before the current turn read as context (what was just said or done).
_CONTEXT_BEFORE = 4


def now_of(layout: Layout) -> Now:
    """What the request is doing now: the current turn's user words and its actions (tool
    calls, a text agent's commands), with the rest of the current turn, the newest turns
    (high priority history) and the messages just before the turn as context."""
    roles, text, base, start = layout.roles, layout.text, layout.base, layout.current_start
    asked: list[str] = []
    actions: list[str] = []
    context: list[str] = []
    for i in range(start, len(roles)):
        if not layout.in_current(i):
            continue
        if roles[i] == "user":
            asked.append(text[base[i]])
            continue
        if roles[i] == "assistant" and (command := command_text(layout, i)):
            actions.append(command)
        context.append(text[base[i]])
    section, high = Section.RECENT_MESSAGES, Priority.HIGH
    context += compress(  # whole-list passes: this runs per request
        text,
        map(
            operator.and_,
            map(operator.is_, layout.section, repeat(section)),
            map(operator.is_, layout.priority, repeat(high)),
        ),
    )
    for i in range(max(0, start - _CONTEXT_BEFORE), start):
        context.append(f"{text[base[i]]}\n{command_text(layout, i)}")
    return Now("\n".join(asked), "\n".join(actions), "\n".join(context), bool(layout.agent))


def agent_query(layout: Layout) -> tuple[str, str] | None:
    """What an agent is doing now: its reasoning and commands in the current turn's tool
    exchanges (the query), and the results and the last user message (the context); None
    when the current turn holds no tool call (then relevance is to the user's words)."""
    units, unit_of, stripped = layout.units, layout.unit_of, layout.stripped
    now = [
        i
        for i in range(layout.current_start, len(stripped))
        if layout.in_current(i) and len(units[unit_of[i]]) > 1
    ]
    if not now:
        return None
    text = layout.text
    query: list[str] = []
    asked = [text[layout.base[i]] for i in range(layout.current_start, len(stripped))
             if layout.roles[i] == "user"]  # fmt: skip
    # A long agent loop: the task's words say little about which result matters now; a
    # tool call inside a chat turn: the question is still the user's.
    context = asked if layout.agent else []
    if not layout.agent:
        query += asked
    # The query: the agent's newest commands, whose paths and identifiers its next one
    # most often repeats (command_keys.py); its reasoning and the newest results weigh as
    # context. With the reasoning in the query, 0.37 of that evidence is kept, not 0.45.
    for i in now:
        own = text[layout.base[i]]
        if layout.roles[i] == "assistant":
            query.append(command_text(layout, i))
        context.append(own)
    return "\n".join(query), "\n".join(context)


def query_texts(layout: Layout) -> tuple[str, str]:
    """What relevance is to: the current turn's user text, and the newest turns' text (in an
    agent loop: its newest reasoning and commands, and the newest results)."""
    if layout.agent:  # an agent loop with history of its own
        found = agent_query(layout)
        if found is not None:
            return found
    start, msg, role, text = layout.current_start, layout.msg, layout.role, layout.text
    kind, summary = layout.kind, Kind.SUMMARY
    if not layout.split and not layout.extra:  # item k is message k: the current turn's
        current = [t for t, r in zip(text[start:], role[start:], strict=True) if r == "user"]
    else:
        current = [
            text[k]
            for k in range(len(msg))
            if msg[k] >= start and role[k] == "user" and kind[k] is not summary
        ]
    section, high = Section.RECENT_MESSAGES, Priority.HIGH
    recent = compress(  # whole-list passes: this runs per request
        text,
        map(
            operator.and_,
            map(operator.is_, layout.section, repeat(section)),
            map(operator.is_, layout.priority, repeat(high)),
        ),
    )
    return "\n".join(current), "\n".join(recent)
