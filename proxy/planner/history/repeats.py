"""Repeats: repeated items by id and by normalized content; summary lines already in memory."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from proxy.planner.parts import Layout
from proxy.types import Priority, Section

MIN_REPEAT_CHARS = 64
_PLAIN_TAGS = frozenset(("default", "current turn", "setup"))  # compared by exact text
_BULLET = re.compile(r"^(?:[-*•+]|\d+[.)])\s+")


def normalize(text: str) -> str:
    """Trimmed, whitespace collapsed, lowercased: two texts equal here say the same thing."""
    return " ".join(text.split()).lower()


def _line_key(line: str) -> str:
    norm = normalize(line)
    first = norm[:1]  # the pattern is only tried where a bullet can start (\d is isdecimal)
    bullet = first.isdecimal() or (first != "" and first in "-*•+")
    return _BULLET.sub("", norm) if bullet else norm


@dataclass(slots=True)
class Dedupe:
    removed: dict[int, str] = field(default_factory=dict)  # item key -> reason
    rewritten: dict[int, tuple[str, str]] = field(default_factory=dict)  # key -> (text, reason)


def _keeper(layout: Layout, keys: list[int]) -> int:
    """Of equal items the one to keep: required first, then higher priority, then newest."""
    priority, msg = layout.priority, layout.msg
    return min(keys, key=lambda k: (priority[k].rank, -msg[k], -k))


def may_repeat(layout: Layout) -> bool:
    """Whether dedupe can find anything: an id, a text twice, or tagged context (memory
    and conversation summaries, whose lines are compared, are only ever tagged: untagged
    items are in system_prompt or recent_messages). Most chats have none of these."""
    text = layout.text
    return bool(
        layout.fields
        or len(set(text)) < len(text)  # the texts' hashes are cached from counting
        or not set(layout.tag) <= _PLAIN_TAGS
    )


def dedupe(layout: Layout, eligible: Iterable[int]) -> Dedupe:
    """Which of the `eligible` items repeat another item (by id, then by content).

    Required items are never removed, but an optional copy of a required item is. Members
    of tool groups are not eligible (a group is kept or dropped whole).

    Tagged context (blocks, heading sections, x_context) compares normalized text. Plain
    conversation compares exact text, same role, and only past a length: short repeats
    ("ok", "thanks") are part of the conversation's flow, and normalizing every message
    of a long history would cost more than the planner's whole time budget.
    """
    keys = eligible if isinstance(eligible, set) else set(eligible)
    result = Dedupe()
    removed, required = result.removed, Priority.REQUIRED
    priority, msg, text, role, tag = (
        layout.priority,
        layout.msg,
        layout.text,
        layout.role,
        layout.tag,
    )
    by_id: dict[str, list[int]] = {}
    for k, f in sorted(layout.fields.items()):
        if f.id is not None and (priority[k] is required or k in keys):
            by_id.setdefault(f.id, []).append(k)
    for ident, same in by_id.items():
        if len(same) > 1:
            keep = _keeper(layout, same)
            for k in same:
                if k != keep and priority[k] is not required:
                    removed[k] = f"duplicate id {ident!r} (kept: message {msg[keep]})"
    # The first item of each content, and the rest only where there is a repeat: most
    # items are unique, and a list per item would cost more than the comparison.
    first: dict[tuple[str, str], int] = {}
    repeats: dict[tuple[str, str], list[int]] = {}
    candidates: list[int] = []
    # No text twice at all (the texts' hashes are cached from counting): nothing repeats.
    twice = len(set(text)) < len(text)
    if twice:
        long = [t for t in text if len(t) >= MIN_REPEAT_CHARS]
        twice = len(set(long)) < len(long)
    if twice or not set(tag) <= _PLAIN_TAGS:
        # Some text twice, or tagged context (compared normalized): look closer. Else
        # nothing can repeat: plain conversation compares exact texts past a length.
        candidates = [
            k
            for k, (p, plain) in enumerate(zip(priority, layout.plain, strict=True))
            if plain and (p is required or (k in keys and k not in removed))
        ]
    for k in candidates:
        if tag[k] in _PLAIN_TAGS:
            if len(text[k]) < MIN_REPEAT_CHARS:
                continue
            key: tuple[str, str] = (role[k], text[k])
        else:
            norm = normalize(text[k])
            if not norm:
                continue
            key = ("", norm)
        seen = first.setdefault(key, k)
        if seen != k:
            repeats.setdefault(key, [seen]).append(k)
    for same in sorted(repeats.values(), key=lambda same: same[0]):  # first-seen order
        if any(priority[k] is not required for k in same):
            keep = _keeper(layout, same)
            for k in same:
                if k != keep and priority[k] is not required:
                    removed[k] = f"same content as message {msg[keep]}"
    _summary_lines(layout, keys, result)
    return result


def _summary_lines(layout: Layout, keys: set[int], result: Dedupe) -> None:
    """Lines of a conversation summary that memory already holds say nothing new."""
    section, text = layout.section, layout.text
    memory_section = Section.MEMORY
    if memory_section not in section:
        return  # no memory: the common case, one scan
    memory = {
        _line_key(line)
        for k, s in enumerate(section)
        if s is memory_section and k not in result.removed
        for line in text[k].splitlines()
    }
    memory.discard("")
    if not memory:
        return
    # Crafted summaries repeat their lines: each distinct line is normalized once.
    line_keys: dict[str, str] = {}
    for k in sorted(keys):
        if (
            section[k] is not Section.CONVERSATION_SUMMARY
            or k in result.removed
            or not layout.plain[k]
        ):
            continue
        lines = text[k].splitlines(keepends=True)
        kept = []
        for line in lines:
            key = line_keys.get(line)
            if key is None:
                key = line_keys[line] = _line_key(line)
            if key not in memory:
                kept.append(line)
        if len(kept) == len(lines):
            continue
        gone = len(lines) - len(kept)
        if not any(line.strip() and not line.lstrip().startswith("#") for line in kept):
            result.removed[k] = f"all {gone} summary lines already in memory"
        else:
            result.rewritten[k] = ("".join(kept), f"{gone} summary lines already in memory")
