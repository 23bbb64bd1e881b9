"""Dedupe: repeated items by id and by normalized content; summary lines already in memory."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from proxy.planner.items import Item, Layout
from proxy.types import Priority, Section

MIN_REPEAT_CHARS = 64
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


def _content_key(it: Item) -> tuple[str, str] | None:
    """What makes two items the same content, or None when the item is not compared.

    Tagged context (blocks, heading sections, x_context) compares normalized text. Plain
    conversation compares exact text, same role, and only past a length: short repeats
    ("ok", "thanks") are part of the conversation's flow, and normalizing every message
    of a long history would cost more than the planner's whole time budget.
    """
    if it.tag in ("default", "current turn"):
        if len(it.text) < MIN_REPEAT_CHARS:
            return None
        return it.role, it.text
    norm = normalize(it.text)
    return ("", norm) if norm else None


def _keeper(items: list[Item]) -> Item:
    """Of equal items the one to keep: required first, then higher priority, then newest."""
    return min(items, key=lambda it: (it.priority.rank, -it.msg, -it.key))


def dedupe(layout: Layout, eligible: Iterable[int]) -> Dedupe:
    """Which of the `eligible` items repeat another item (by id, then by content).

    Required items are never removed, but an optional copy of a required item is. Members
    of tool groups are not eligible (a group is kept or dropped whole).
    """
    items = layout.items
    keys = set(eligible)
    result = Dedupe()
    by_id: dict[str, list[Item]] = {}
    for it in items:
        if it.id is not None and (it.required or it.key in keys):
            by_id.setdefault(it.id, []).append(it)
    for ident, same in by_id.items():
        if len(same) > 1:
            keep = _keeper(same)
            for it in same:
                if it is not keep and not it.required:
                    result.removed[it.key] = f"duplicate id {ident!r} (kept: message {keep.msg})"
    # The first item of each content, and the rest only where there is a repeat: most
    # items are unique, and a list per item would cost more than the comparison.
    first: dict[tuple[str, str], Item] = {}
    repeats: dict[tuple[str, str], list[Item]] = {}
    removed, required = result.removed, Priority.REQUIRED
    for it in items:  # runs per item: the property and _content_key's common case inlined
        if not it.plain or (
            it.priority is not required and (it.key not in keys or it.key in removed)
        ):
            continue
        if it.tag in ("default", "current turn"):
            if len(it.text) < MIN_REPEAT_CHARS:
                continue
            key: tuple[str, str] | None = (it.role, it.text)
        else:
            key = _content_key(it)
        if key is None:
            continue
        seen = first.setdefault(key, it)
        if seen is not it:
            repeats.setdefault(key, [seen]).append(it)
    for same in sorted(repeats.values(), key=lambda same: same[0].key):  # first-seen order
        if any(not it.required for it in same):
            keep = _keeper(same)
            for it in same:
                if it is not keep and not it.required:
                    result.removed[it.key] = f"same content as message {keep.msg}"
    _summary_lines(items, keys, result)
    return result


def _summary_lines(items: list[Item], keys: set[int], result: Dedupe) -> None:
    """Lines of a conversation summary that memory already holds say nothing new."""
    memory = {
        _line_key(line)
        for it in items
        if it.section is Section.MEMORY and it.key not in result.removed
        for line in it.text.splitlines()
    }
    memory.discard("")
    if not memory:
        return
    # Crafted summaries repeat their lines: each distinct line is normalized once.
    line_keys: dict[str, str] = {}
    for it in (items[k] for k in sorted(keys)):
        if (
            it.section is not Section.CONVERSATION_SUMMARY
            or it.key in result.removed
            or not it.plain
        ):
            continue
        lines = it.text.splitlines(keepends=True)
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
            result.removed[it.key] = f"all {gone} summary lines already in memory"
        else:
            result.rewritten[it.key] = ("".join(kept), f"{gone} summary lines already in memory")
