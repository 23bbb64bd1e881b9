"""Excerpts: an old tool result cut to its head and the parts that name what matters.

Clearing a result keeps the agent's trail and loses what it read; keeping it whole may
cost more than the room holds (a flight search, a file, a long listing). Most of what a
later step needs from such a result is a few strings in it: the ids the conversation went
on to use (a reservation looked up and then changed, the flight then booked) and the
strings the request names now (the paths and identifiers of the newest commands, the ids
of the newest turn). An excerpt keeps the result's head (what it is) and a window of text
around each of those strings, and says what was cut, so the model knows it saw a part.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from proxy.planner.parts import Layout, command_text
from proxy.relevance import TermIndex

HEAD_CHARS = 160  # the result's start: what it is (its id, its first fields)
# Text kept on either side of a string inside a long line (a JSON result on one line); a
# shorter line is kept whole. On tau-airline at 2,800 tokens (evidence recall) 20 characters
# keep 0.556, 40 0.541, 70 0.525: 40 leaves a field's name and value around an id.
WINDOW_CHARS = 40
MAX_STRINGS = 24  # strings a result is excerpted around, at most
MAX_SHARE = 0.5  # an excerpt past half its result is not worth the cut
_RESULTS = ("tool", "function")


def last_said(layout: Layout, index: TermIndex) -> dict[str, int]:
    """Each id and number said or called in a message (results not counted: an id listed
    again in another lookup is no use of it), and the last message that did."""
    roles, text, base = layout.roles, layout.text, layout.base
    said: dict[str, int] = {}
    for i, role in enumerate(roles):
        if role in _RESULTS:
            continue
        said.update(dict.fromkeys(index.figures(text[base[i]]), i))
        command = command_text(layout, i)
        if command:
            said.update(dict.fromkeys(index.figures(command), i))
    return said


def strings_to_keep(
    text: str, held: frozenset[str], after: int, said: Mapping[str, int], commands: Iterable[str]
) -> list[str]:
    """The strings of `text` (message `after`, holding the figures `held`) an excerpt keeps,
    in order of appearance: the ids and numbers the conversation went on to use or names
    now (said after it), and the newest commands' strings it holds. (Its other ids too made
    excerpts too long to save much: on tau-airline at 2,800 tokens 0.535 instead of 0.541.)"""
    wanted = {f for f in held if said.get(f, -1) > after}
    wanted.update(k for k in commands if k in text)
    return sorted(wanted, key=lambda k: (text.find(k), k))[:MAX_STRINGS]


def excerpt(
    text: str, strings: Sequence[str], named_as: tuple[str, str], tokens: int
) -> str | None:
    """`text` cut to its head and a window around each of `strings` (in their order, while
    the excerpt stays under MAX_SHARE of the text), with a note of what was cut; None when
    nothing worth keeping is in it or the cut would save too little."""
    if not strings or len(text) <= HEAD_CHARS + 2 * WINDOW_CHARS:
        return None
    room = MAX_SHARE * len(text)
    head = text.rfind("\n", 0, HEAD_CHARS)  # whole lines, when the head holds some
    spans: list[tuple[int, int]] = [(0, head if head > HEAD_CHARS // 4 else HEAD_CHARS)]
    named: list[str] = []
    for s in strings:
        at = text.find(s)
        if at < 0:
            continue
        span = _window(text, at, at + len(s))
        if _length(_merged([*spans, span])) > room:
            break
        spans.append(span)
        named.append(s)
    if not named:
        return None
    merged = _merged(spans)
    gap = "\n[…]\n" if "\n" in text else " […] "  # lines apart, or cuts inside one line
    body = gap.join(text[start:end].strip("\n") for start, end in merged)
    if merged[-1][1] < len(text):
        body += gap.rstrip("\n")
    names = ", ".join(named[:6]) + (", …" if len(named) > 6 else "")
    name, recall = named_as
    return (
        f"{body}\n[context-proxy: result of {name} cut from {tokens:,} tokens to the parts "
        f"naming {names}, recall {recall}]"
    )


def _window(text: str, start: int, end: int) -> tuple[int, int]:
    """The line holding text[start:end] (a file's line, a log line), or WINDOW_CHARS on
    either side of it when that line is longer (a long JSON line)."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    if line_end - line_start <= 2 * WINDOW_CHARS + (end - start):
        return line_start, line_end
    return max(0, start - WINDOW_CHARS), min(len(text), end + WINDOW_CHARS)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    ordered = sorted(spans)
    out = [ordered[0]]
    for start, end in ordered[1:]:
        if start <= out[-1][1] + 20:  # a gap this short is not worth a marker
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _length(spans: list[tuple[int, int]]) -> int:
    return sum(end - start for start, end in spans)
