"""Sections, one message at a time: a message with tags, blocks, headings or an odd shape.

Its own item first, then one item per inline `<context>` block and per heading section,
all appended to the layout's columns; the message's text parts are kept (a Split) so that
trim can put the forwarded message back together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.planner.parts.items import Kind, Layout, Part, Split, Tag
from proxy.planner.parts.messages import well_shaped
from proxy.planner.parts.tag_fields import read_tag, section_policy
from proxy.planner.parts.tags import Block, split_blocks, split_headings
from proxy.planner.parts.trust import held_to_user, unread
from proxy.policy import Policy
from proxy.types import Priority, Section

_SYSTEM_ROLES = ("system", "developer")
_TEXT_PARTS = ("text", "input_text")
_BLOCK_ATTRS = frozenset(("section", "priority", "id", "cluster", "score", "summary_of"))
_REQUIRED = Priority.REQUIRED


def _default_tag(layout: Layout, i: int, role: str, policy: Policy, turns: tuple[int, int]) -> Tag:
    if role in _SYSTEM_ROLES:
        return Tag(Section.SYSTEM_PROMPT, Priority.REQUIRED, "default")
    if i < layout.setup_end:  # what the request is for: kept whole
        return Tag(Section.GOAL if role == "user" else Section.RECENT_MESSAGES, _REQUIRED, "setup")
    if i in layout.agent:  # an older exchange of an agent loop: history
        return Tag(Section.RECENT_MESSAGES, Priority.LOW, "agent history")
    if i >= layout.current_start:
        return Tag(Section.RECENT_MESSAGES, Priority.REQUIRED, "current turn")
    turn, current = turns
    recent = turn >= current - policy.history.keep_recent
    return Tag(Section.RECENT_MESSAGES, Priority.HIGH if recent else Priority.LOW, "default")


def split_message(
    layout: Layout, i: int, message: Any, policy: Policy, turns: tuple[int, int], role: str
) -> None:
    """Message i (of any shape, planned as `role`) into the layout: its items, its parts,
    what was wrong. Tags are read by trust (trust.py): the operator's fully, a user's only
    as far as a user may claim, the model's and the outside world's not at all."""
    current = layout.in_current(i)
    where = f"message {i}"
    problems = layout.problems
    tagged = isinstance(message, dict) and "x_context" in message
    stripped = {k: v for k, v in message.items() if k != "x_context"} if tagged else message
    tag = _default_tag(layout, i, role, policy, turns)
    layout.roles.append(role)
    if not well_shaped(message):
        problems.append(f"{where}: unexpected message shape, forwarded untouched")
        tag.priority, tag.source = Priority.REQUIRED, "opaque"
        base = layout.add_item(i, role, Kind.OPAQUE, tag, "", False)
        layout.stripped.append(stripped)
        layout.base.append(base)
        layout.split[i] = Split([base], [], tagged)
        return
    operator, client = role in _SYSTEM_ROLES, role == "user"
    x = message.get("x_context")
    if isinstance(x, dict) and (operator or client):
        default = tag
        tag = read_tag(x, tag, policy, f"{where} x_context", problems, "x_context")
        if client:
            held_to_user(tag, default, x, f"{where} x_context", problems)
    elif tagged:
        problems.append(f"{where}: x_context {unread(role)}")
    # The current turn and the setup stay whole; so does system text, unless its tag names
    # a section or a priority of its own (a summary or memory sent as a system message is
    # not required just because of its role or its place before the first answer).
    own = isinstance(x, dict) and (
        tag.section is not Section.SYSTEM_PROMPT or x.get("priority") is not None
    )
    protected = current or (operator and not own) or (i < layout.setup_end and not operator)
    if protected and tag.priority is not Priority.REQUIRED:
        tag.priority = Priority.REQUIRED
    content = message.get("content")
    plain = not message.get("tool_calls") and not message.get("function_call")
    texts: list[tuple[int | None, str]] = []
    if isinstance(content, str):
        texts.append((None, content))
    elif isinstance(content, list):
        for index, part in enumerate(content):
            if (
                isinstance(part, dict)
                and part.get("type") in _TEXT_PARTS
                and isinstance(part.get("text"), str)
            ):
                texts.append((index, part["text"]))
            else:
                plain = False
    base = layout.add_item(i, role, Kind.MESSAGE, tag, "", plain)
    split = Split([base], [], tagged)
    headings = operator and tag.source != "x_context"
    inline = operator or (client and policy.tags.inline_in_user)
    base_text: list[str] = []
    new_parts: dict[int | None, str] = {}
    for p, text in texts:
        pieces, found = split_blocks(text) if inline else ([text], [])
        problems.extend(f"{where}: {f}" for f in found)
        part = Part(p, [])
        for piece in pieces:
            if isinstance(piece, Block):
                split.tagged = True
                problems.extend(f"{where}: {f}" for f in piece.problems)
                btag = read_tag(piece.attrs, tag, policy, f"{where} <context>", problems, "inline")
                if client:
                    held_to_user(btag, tag, piece.attrs, f"{where} <context>", problems)
                unknown = sorted(set(piece.attrs) - _BLOCK_ATTRS)
                if unknown:
                    problems.append(f"{where} <context>: unknown attributes {', '.join(unknown)}")
                key = layout.add_item(i, role, Kind.BLOCK, btag, piece.inner, True)
                split.items.append(key)
                part.pieces.append((key, piece.inner))
                continue
            for section, chunk in (
                split_headings(piece, policy.headings) if headings else [(None, piece)]
            ):
                if section is None:
                    part.pieces.append((base, chunk))
                    base_text.append(chunk)
                    continue
                htag = Tag(section, section_policy(policy, section).priority, "heading")
                key = layout.add_item(i, role, Kind.HEADING, htag, chunk, True)
                split.items.append(key)
                part.pieces.append((key, chunk))
        split.parts.append(part)
        new_parts[p] = "".join(t for _, t in part.pieces)
    layout.text[base] = "".join(base_text)
    layout.stripped.append(_with_texts(stripped, new_parts) if split.tagged else stripped)
    layout.base.append(base)
    layout.split[i] = split


def _with_texts(message: dict[str, Any], texts: Mapping[int | None, str]) -> dict[str, Any]:
    """`message` with its string content or text parts replaced (tags removed)."""
    out = dict(message)
    if None in texts:
        out["content"] = texts[None]
    elif texts:
        out["content"] = [
            {**part, "text": texts[p]} if p in texts else part
            for p, part in enumerate(message["content"])
        ]
    return out
