"""Tags: well-formed inline <context ...>…</context> blocks, and markdown section headings.

Client text is read in linear time: no pattern here can backtrack, since one crafted 20 KB
message would otherwise hold the event loop (and every other request) for seconds.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass

from proxy.planner.parts.tag_attrs import parse_attrs
from proxy.types import Section

# `<context>` or `<context attr=...>`; not `<contextual>`, not a self-closing `<context/>`.
# Linear: one quantifier, over a class that the next `<` or `>` ends; a failed try gives up
# a run without `<`, and the next try starts at or past that `<`.
_OPEN = re.compile(r"<context(?=[\s>])([^<>]*)>")
_SELF = re.compile(r"<context(?=[\s>])[^<>]*/\s*>")  # linear as _OPEN: `/` and `\s` end at `>`
_CLOSE = "</context>"
_MAX_PROBLEMS = 20  # per text: a crafted body must not make a plan of a million lines
# A line starts where str.splitlines would start one; it opens a heading or a fence.
# `\r\n` is one break: the `\n` after a `\r` cannot start a mark, so either may stand.
_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_MARK = re.compile(
    f"[{_BREAKS}]" + r"(?:(#{1,6})[ \t]" + f"([^{_BREAKS}]*)" + r"|[ \t]{0,3}(?:```|~~~))"
)

__all__ = ["Block", "parse_attrs", "split_blocks", "split_headings"]


@dataclass(frozen=True, slots=True)
class Block:
    attrs: dict[str, str]
    inner: str
    problems: tuple[str, ...] = ()


def split_blocks(text: str) -> tuple[list[str | Block], list[str]]:
    """Text cut into outside strings and blocks; the problems found (unclosed, nested tags).

    Only an opening tag whose next `</context>` comes before any other opening tag is a
    block; anything else (a lone open or close, nesting) stays text, as written. Linear:
    the openers are found once, the search for `</context>` only moves forward, and a run
    of unmatched openers is passed over in one step.
    """
    if "<" not in text or "<context" not in text:  # one character is found much faster
        return [text], []
    starts = [m.start() for m in _OPEN.finditer(text)]  # ints: no objects kept per tag
    selfs = {m.start() for m in _SELF.finditer(text)}  # the same tags, self-closing ones
    plain = [p for p in starts if p not in selfs] if selfs else starts  # all the others
    pieces: list[str | Block] = []
    problems: list[str] = []
    pos = more = i = 0
    while i < len(starts):
        close = text.find(_CLOSE, text.index(">", starts[i]) + 1)
        lo = bisect_left(plain, starts[i])
        if close < 0:
            if lo < len(plain):
                problems.append(f"unclosed <context> at character {plain[lo]}: kept as text")
            break
        # Openers i..last come before this close: only the last can be its block; every
        # other one (not self-closing) has the next opener before its close: kept as text.
        last = bisect_left(starts, close, i + 1) - 1
        hi = bisect_left(plain, starts[last])
        room = max(0, min(hi, lo + _MAX_PROBLEMS - len(problems)))  # the rest only counted
        problems.extend(
            f"<context> at character {p} has no matching close: kept as text"
            for p in plain[lo:room]
        )
        more += hi - max(lo, room)
        if starts[last] not in selfs:
            m = _OPEN.match(text, starts[last])
            assert m is not None  # found there by the same pattern
            if m.start() > pos:
                pieces.append(text[pos : m.start()])
            attrs, bad = parse_attrs(m.group(1))
            pieces.append(Block(attrs, text[m.end() : close], tuple(bad)))
            pos = close + len(_CLOSE)
        i = last + 1
    if pos < len(text) or not pieces:
        pieces.append(text[pos:])
    if more:
        problems.append(f"{more} more <context> tags without a matching close: kept as text")
    return pieces, problems


def split_headings(text: str, headings: Mapping[str, Section]) -> list[tuple[Section | None, str]]:
    """Text cut at markdown headings; each piece with the section its heading names, else None.

    A known heading starts its section; the section runs to the next heading of the same or
    a higher level (deeper sub-headings stay inside). Headings inside code fences are text.
    """
    if "#" not in text:
        return [(None, text)]
    out: list[tuple[Section | None, str]] = []
    current: Section | None = None
    level = 0
    start = 0
    fenced = False
    # Only lines that open a heading or a fence are looked at, found by one pattern that
    # starts with a class the engine skips to fast (a Python step per line costs more).
    for m in _MARK.finditer("\n" + text):  # the first line as if a line ended before it
        hashes = m.group(1)
        if hashes is None:
            fenced = not fenced
            continue
        if fenced:
            continue
        pos, depth, title = m.start(), len(hashes), m.group(2).lstrip(" \t")
        # `(.*?)[ \t#]*\r?\n?$`: a trailing run of spaces and # goes, unless another break
        # (\x0b, \u2028, ...) ends the line: the title keeps it, and what stands before it.
        if m.end() > len(text) or text[m.end() - 1] in "\r\n":
            title = title.rstrip(" \t#")
        section = headings.get(title.strip().rstrip(":").strip().lower())
        if section is not None or (current is not None and depth <= level):
            if pos > start:
                out.append((current, text[start:pos]))
            start = pos
            current, level = (section, depth) if section is not None else (None, 0)
    if len(text) > start or not out:
        out.append((current, text[start:]))
    return out
