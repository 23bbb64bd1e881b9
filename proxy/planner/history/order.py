"""History order: which older turns to keep first — by relevance to the current turn, or recency."""

from __future__ import annotations

from collections.abc import Iterable

from proxy.planner.history.rank import Now
from proxy.planner.parts import Kind, Layout, command_text
from proxy.types import Section

# Messages just before the current turn read as context (what was just said or done).
_CONTEXT_BEFORE = 4
# The newest turns read as what the request is doing now, beside the current turn's words
# (relevance was measured with the newest six).
CONTEXT_TURNS = 6


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
    """The newest CONTEXT_TURNS turns' texts (their conversation: between the setup and
    the current turn, but for the operator's parts and an agent's older exchanges)."""
    roles, start, end = layout.roles, layout.setup_end, layout.current_start
    first, seen = start, 0
    for i in range(end - 1, start - 1, -1):
        if roles[i] == "user":
            seen += 1
            if seen == CONTEXT_TURNS:
                first = i
                break
    section, text, agent, recent = (
        layout.section,
        layout.text,
        layout.agent,
        Section.RECENT_MESSAGES,
    )
    if not layout.split and len(layout.msg) == len(roles):  # item k is message k
        keys: Iterable[int] = range(first, end)
    else:
        keys = (k for i in range(first, end) for k in layout.items_of(i))
    return [text[k] for k in keys if section[k] is recent and layout.msg[k] not in agent]
