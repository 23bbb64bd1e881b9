"""Tags: well-formed inline <context ...>…</context> blocks, and markdown section headings.

Client text is read in linear time: no pattern here can backtrack, since one crafted 20 KB
message would otherwise hold the event loop (and every other request) for seconds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from proxy.tag_attrs import parse_attrs
from proxy.types import Section

# `<context>` or `<context attr=...>`; not `<contextual>`, not a self-closing `<context/>`.
# Linear: one quantifier, over a class that the next `<` or `>` ends; a failed try gives up
# a run without `<`, and the next try starts at or past that `<`.
_OPEN = re.compile(r"<context(?=[\s>])([^<>]*)>")
_CLOSE = "</context>"
_MAX_PROBLEMS = 20  # per text: a crafted body must not make a plan of a million lines
_FENCE = re.compile(r"[ \t]{0,3}(```|~~~)")

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
    the openers are found once, and the search for `</context>` only moves forward.
    """
    if "<" not in text or "<context" not in text:  # one character is found much faster
        return [text], []
    pieces: list[str | Block] = []
    problems: list[str] = []
    opens = [(m.start(), m.end()) for m in _OPEN.finditer(text)]
    pos = more = 0
    close = -1
    for i, (start, end) in enumerate(opens):
        source = text[start + 8 : end - 1]  # after `<context`, before `>`
        if source.rstrip().endswith("/"):
            continue  # self-closing: not a block
        if close < end:  # else the `</context>` found before is still the first after `end`
            close = text.find(_CLOSE, end)
        if close < 0:
            problems.append(f"unclosed <context> at character {start}: kept as text")
            break
        if i + 1 < len(opens) and opens[i + 1][0] < close:
            if len(problems) < _MAX_PROBLEMS:
                problems.append(
                    f"<context> at character {start} has no matching close: kept as text"
                )
            else:
                more += 1
            continue
        if start > pos:
            pieces.append(text[pos:start])
        attrs, bad = parse_attrs(source)
        pieces.append(Block(attrs, text[end:close], tuple(bad)))
        pos = close + len(_CLOSE)
    if pos < len(text) or not pieces:
        pieces.append(text[pos:])
    if more:
        problems.append(f"{more} more <context> tags without a matching close: kept as text")
    return pieces, problems


def _heading(line: str) -> tuple[int, str] | None:
    """Level and title of a markdown heading line, else None.

    As the pattern `(#{1,6})[ \\t]+(.*?)[ \\t#]*\\r?\\n?$` reads it, without its backtracking
    (the lazy title against the trailing run, retried at every space: 20 KB took 9 s)."""
    depth = 0
    while depth < len(line) and depth < 7 and line[depth] == "#":
        depth += 1
    if not 1 <= depth <= 6 or depth == len(line) or line[depth] not in " \t":
        return None
    title = line[depth:].lstrip(" \t").removesuffix("\n").removesuffix("\r")
    return depth, title.rstrip(" \t#")


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
    pos = 0
    fenced = False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#") and (found := _heading(line)) is not None:
            depth, title = found
            section = headings.get(title.strip().rstrip(":").strip().lower())
            if section is not None or (current is not None and depth <= level):
                if pos > start:
                    out.append((current, text[start:pos]))
                start = pos
                current, level = (section, depth) if section is not None else (None, 0)
        pos += len(line)
    if pos > start or not out:
        out.append((current, text[start:]))
    return out
