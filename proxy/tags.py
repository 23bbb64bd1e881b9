"""Tags: well-formed inline <context ...>…</context> blocks, and markdown section headings."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from proxy.types import Section

# `<context>` or `<context attr=...>`; not `<contextual>`, not a self-closing `<context/>`.
_OPEN = re.compile(r"<context(?=[\s>])([^<>]*)>")
_CLOSE = "</context>"
_ATTR = re.compile(r"""([A-Za-z_][\w-]*)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""")
_HEADING = re.compile(r"(#{1,6})[ \t]+(.*?)[ \t#]*\r?\n?$")
_FENCE = re.compile(r"[ \t]{0,3}(```|~~~)")


@dataclass(frozen=True, slots=True)
class Block:
    attrs: dict[str, str]
    inner: str
    problems: tuple[str, ...] = ()


def split_blocks(text: str) -> tuple[list[str | Block], list[str]]:
    """Text cut into outside strings and blocks; the problems found (unclosed, nested tags).

    Only an opening tag whose next `</context>` comes before any other opening tag is a
    block; anything else (a lone open or close, nesting) stays text, as written.
    """
    if "<" not in text or "<context" not in text:  # one character is found much faster
        return [text], []
    pieces: list[str | Block] = []
    problems: list[str] = []
    pos = scan = 0
    while (m := _OPEN.search(text, scan)) is not None:
        if m.group(1).rstrip().endswith("/"):
            scan = m.end()
            continue
        close = text.find(_CLOSE, m.end())
        if close < 0:
            problems.append(f"unclosed <context> at character {m.start()}: kept as text")
            break
        nested = _OPEN.search(text, m.end(), close)
        if nested is not None:
            problems.append(
                f"<context> at character {m.start()} has no matching close: kept as text"
            )
            scan = nested.start()
            continue
        if m.start() > pos:
            pieces.append(text[pos : m.start()])
        attrs, bad = parse_attrs(m.group(1))
        pieces.append(Block(attrs, text[m.end() : close], tuple(bad)))
        pos = scan = close + len(_CLOSE)
    if pos < len(text) or not pieces:
        pieces.append(text[pos:])
    return pieces, problems


def parse_attrs(source: str) -> tuple[dict[str, str], list[str]]:
    attrs: dict[str, str] = {}
    for m in _ATTR.finditer(source):
        value = next(v for v in m.group(2, 3, 4) if v is not None)
        attrs.setdefault(m.group(1).lower(), value)
    rest = _ATTR.sub("", source).strip()
    return attrs, ([f"unreadable text in a <context> tag: {rest[:40]!r}"] if rest else [])


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
        elif not fenced and line.startswith("#") and (m := _HEADING.match(line)):
            depth = len(m.group(1))
            section = headings.get(m.group(2).strip().rstrip(":").strip().lower())
            if section is not None or (current is not None and depth <= level):
                if pos > start:
                    out.append((current, text[start:pos]))
                start = pos
                current, level = (section, depth) if section is not None else (None, 0)
        pos += len(line)
    if pos > start or not out:
        out.append((current, text[start:]))
    return out
