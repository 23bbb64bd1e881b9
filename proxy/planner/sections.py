"""Sections: a request's messages cut into items, each tagged with a section and a priority.

First match wins: the message's `x_context`; inline `<context>` blocks (each block its own
item); heading rules in system messages; defaults by position (system prompt, current
turn, the newest `keep_recent` turns, older history).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.planner.costs import well_shaped
from proxy.planner.groups import Shape, role_of, shape
from proxy.planner.items import Item, Kind, Layout, MessageLayout, Part
from proxy.planner.tag_fields import Tag, read_tag, section_policy
from proxy.planner.tags import Block, split_blocks, split_headings
from proxy.policy import Policy
from proxy.types import Priority, Section

_SYSTEM_ROLES = ("system", "developer")
_PLAIN_ROLES = ("user", "assistant", "tool", "function")
_TEXT_PARTS = ("text", "input_text")


def _default_tag(i: int, role: str, sh: Shape, policy: Policy) -> Tag:
    if role in _SYSTEM_ROLES:
        return Tag(Section.SYSTEM_PROMPT, Priority.REQUIRED, "default")
    if i >= sh.current_start:
        return Tag(Section.RECENT_MESSAGES, Priority.REQUIRED, "current turn")
    recent = sh.turn_of[i] >= sh.current_turn - policy.history.keep_recent
    return Tag(Section.RECENT_MESSAGES, Priority.HIGH if recent else Priority.LOW, "default")


class _Builder:
    def __init__(self, messages: Sequence[Any], policy: Policy, checked: bool) -> None:
        self.policy = policy
        self.checked = checked
        self.shape = shape(messages)
        self.layout = Layout([], [], self.shape.units, self.shape.current_start)

    def item(self, i: int, role: str, kind: Kind, tag: Tag, text: str, plain: bool) -> int:
        key = len(self.layout.items)
        self.layout.items.append(
            Item(
                key,
                i,
                role,
                kind,
                tag.section,
                tag.priority,
                text,
                tag.source,
                tag.id,
                tag.cluster,
                tag.score,
                tag.summary_of,
                i >= self.shape.current_start,
                plain,
            )
        )
        return key

    def message(self, i: int, message: Any) -> None:
        role = role_of(message)
        protected = role in _SYSTEM_ROLES or i >= self.shape.current_start
        unit = self.shape.unit_of[i]
        group = len(self.shape.units[unit]) > 1
        where = f"message {i}"
        problems = self.layout.problems
        tagged = isinstance(message, dict) and "x_context" in message
        stripped = {k: v for k, v in message.items() if k != "x_context"} if tagged else message
        tag = _default_tag(i, role, self.shape, self.policy)
        if not well_shaped(message):
            problems.append(f"{where}: unexpected message shape, forwarded untouched")
            tag.priority, tag.source = Priority.REQUIRED, "opaque"
            base = self.item(i, role, Kind.OPAQUE, tag, "", False)
            self.layout.messages.append(
                MessageLayout(i, message, stripped, role, base, [base], [], unit, group, tagged)
            )
            return
        x = message.get("x_context")
        if isinstance(x, dict):
            tag = read_tag(x, tag, self.policy, f"{where} x_context", problems, "x_context")
        elif tagged:
            problems.append(f"{where}: x_context is not an object, ignored")
        if protected and tag.priority is not Priority.REQUIRED:
            tag.priority = Priority.REQUIRED  # system messages and the current turn stay whole
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
        base = self.item(i, role, Kind.MESSAGE, tag, "", plain)
        layout = MessageLayout(i, message, stripped, role, base, [base], [], unit, group, tagged)
        headings = role in _SYSTEM_ROLES and tag.source != "x_context"
        base_text: list[str] = []
        new_parts: dict[int | None, str] = {}
        for p, text in texts:
            pieces, found = split_blocks(text)
            problems.extend(f"{where}: {f}" for f in found)
            part = Part(p, [])
            for piece in pieces:
                if isinstance(piece, Block):
                    layout.tagged = True
                    problems.extend(f"{where}: {f}" for f in piece.problems)
                    btag = read_tag(
                        piece.attrs, tag, self.policy, f"{where} <context>", problems, "inline"
                    )
                    unknown = sorted(
                        set(piece.attrs)
                        - {"section", "priority", "id", "cluster", "score", "summary_of"}
                    )
                    if unknown:
                        problems.append(
                            f"{where} <context>: unknown attributes {', '.join(unknown)}"
                        )
                    key = self.item(i, role, Kind.BLOCK, btag, piece.inner, True)
                    layout.items.append(key)
                    part.pieces.append((key, piece.inner))
                    continue
                for section, chunk in (
                    split_headings(piece, self.policy.headings) if headings else [(None, piece)]
                ):
                    if section is None:
                        part.pieces.append((base, chunk))
                        base_text.append(chunk)
                        continue
                    htag = Tag(section, section_policy(self.policy, section).priority, "heading")
                    key = self.item(i, role, Kind.HEADING, htag, chunk, True)
                    layout.items.append(key)
                    part.pieces.append((key, chunk))
            layout.parts.append(part)
            new_parts[p] = "".join(t for _, t in part.pieces)
        self.layout.items[base].text = "".join(base_text)
        if layout.tagged:
            layout.stripped = _with_texts(stripped, new_parts)
        self.layout.messages.append(layout)


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


def build_layout(messages: Sequence[Any], policy: Policy, *, checked: bool = False) -> Layout:
    """Every message cut into tagged items; a tool group takes one section and priority.

    `checked`: every message is already known to be well shaped and free of tags (no
    x_context, no `<context` in its text): saves a second look."""
    builder = _Builder(messages, policy, checked)
    layout = builder.layout
    sh = builder.shape
    items, mls = layout.items, layout.messages
    turn_of, unit_of, start = sh.turn_of, sh.unit_of, sh.current_start
    sizes = [len(unit) for unit in sh.units]
    recent_from = sh.current_turn - policy.history.keep_recent
    required, high, low = Priority.REQUIRED, Priority.HIGH, Priority.LOW
    kind, section = Kind.MESSAGE, Section.RECENT_MESSAGES
    for i, message in enumerate(messages):
        # The common case, kept lean: an untagged text message outside the system prompt.
        if type(message) is dict and "x_context" not in message:
            content: Any = message.get("content")
            role = message.get("role")
            text = type(content) is str
            if (
                (text or content is None)
                and role in _PLAIN_ROLES
                and (
                    checked
                    or (
                        (not text or "<" not in content or "<context" not in content)
                        and well_shaped(message)
                    )
                )
            ):
                if i >= start:
                    priority, source = required, "current turn"
                else:
                    priority, source = (high if turn_of[i] >= recent_from else low), "default"
                key = len(items)
                if not text:  # a tool call without text: as the general path makes it
                    plain = not message.get("tool_calls") and not message.get("function_call")
                    items.append(
                        Item(key, i, role, kind, section, priority, "", source, None, None,
                             None, (), i >= start, plain)
                    )  # fmt: skip
                    unit = unit_of[i]
                    mls.append(
                        MessageLayout(i, message, message, role, key, [key], [], unit,
                                      sizes[unit] > 1, False)
                    )  # fmt: skip
                    continue
                plain = "tool_calls" not in message and "function_call" not in message
                items.append(
                    Item(key, i, role, kind, section, priority, content, source, None, None,
                         None, (), i >= start, plain)
                )  # fmt: skip
                unit = unit_of[i]
                mls.append(
                    MessageLayout(i, message, message, role, key, [key],
                                  [Part(None, [(key, content)])], unit, sizes[unit] > 1, False)
                )  # fmt: skip
                continue
        builder.message(i, message)
    _unify_groups(layout)
    return layout


def _unify_groups(layout: Layout) -> None:
    """A tool group is one unit: its messages share the first tagged member's section and
    priority, and a required item anywhere in it makes the whole group required."""
    for unit in layout.units:
        if len(unit) < 2:
            continue
        bases = [layout.items[layout.messages[i].base] for i in unit]
        lead = next((b for b in bases if b.tag == "x_context"), bases[0])
        required = any(layout.items[k].required for i in unit for k in layout.messages[i].items)
        for b in bases:
            b.section = lead.section
            b.priority = Priority.REQUIRED if required else lead.priority
