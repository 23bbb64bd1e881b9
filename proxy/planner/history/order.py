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
    context += newest_texts(layout)
    for i in range(max(0, start - _CONTEXT_BEFORE), start):
        context.append(f"{text[base[i]]}\n{command_text(layout, i)}")
    return Now("\n".join(asked), "\n".join(actions), "\n".join(context), bool(layout.agent))


def query_texts(layout: Layout) -> tuple[str, str]:
    """What a chat turn's recall is sized and scored by (cache/chat.py): the current
    turn's user text, and the newest turns' text."""
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
    return "\n".join(current), "\n".join(newest_texts(layout))


def newest_texts(layout: Layout) -> list[str]:
    """The newest turns' texts: the history's high priority conversation, and what was
    pinned of it (required, between the setup and the current turn: budget/pinned.py)."""
    section, high, required = Section.RECENT_MESSAGES, Priority.HIGH, Priority.REQUIRED
    # Whole-list passes: this runs per request.
    recent = list(map(operator.is_, layout.section, repeat(section)))
    out = list(
        compress(
            layout.text,
            map(operator.and_, recent, map(operator.is_, layout.priority, repeat(high))),
        )
    )
    if required in layout.priority:
        msg, start, end = layout.msg, layout.setup_end, layout.current_start
        out += (
            layout.text[k]
            for k in compress(range(len(msg)), recent)
            if layout.priority[k] is required and start <= msg[k] < end
        )
    return out
