"""File text: whether a result shows a file's text (numbered lines, a file window, a diff),
read from the text itself, and how a cut of it ends (on a whole line).

A next edit repeats a file's lines as they stand, so an old result showing them is kept
whole or cleared, never cut to scattered lines (excerpts are for records: JSON, tables,
logs, listings); where one must be cut to fit (a chat's tool group on the budget's edge,
the newest result alone over it) it keeps its head in whole lines. The test is on the
content, whatever the command was called and however its arguments name the file:
`nl -ba` and `cat -n` (`  12\\tcode`, Codex's shell output in its JSON too),
Claude Code's Read (`    12→code`), SWE-agent's `open`/`goto`/`edit` windows (`12:code`),
`grep -n` with context lines (`12:hit`, `13-next`), and any diff.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import orjson

# A numbered line: a line number, then a tab, an arrow, a colon, a bar or a dash.
_NUMBERED = re.compile(r"^[ \t]*(\d{1,7})(?:\t|→|:|\||-(?!-))", re.M)
_DIFF = re.compile(
    r"^(?:@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@|diff --git |\*\*\* (?:Update|Add) File: )", re.M
)
MIN_RUN = 3  # consecutively numbered lines that make a window
# Share of the text's non-empty lines that must follow their number's predecessor: a log
# with a clock (12:30:01) or a numbered list of two items is no window.
MIN_SHARE = 0.4


def shows_file_text(text: str) -> bool:
    """Whether `text` shows a file's text: a diff, or lines numbered one after another (also
    as the `output` string of a JSON result: Codex's shell tool answers that way)."""
    if text[:1] == "{" and '"output"' in text[:200]:
        try:
            wrapped = orjson.loads(text)
        except orjson.JSONDecodeError:
            wrapped = None
        if isinstance(wrapped, dict) and isinstance(wrapped.get("output"), str):
            text = wrapped["output"]
    if _DIFF.search(text) is not None:
        return True
    found = _NUMBERED.findall(text)
    if len(found) < MIN_RUN:
        return False
    numbers = list(map(int, found))
    following = sum(1 for a, b in itertools.pairwise(numbers) if b == a + 1)
    lines = sum(1 for line in text.splitlines() if line.strip())
    return following + 1 >= max(MIN_RUN, MIN_SHARE * lines)


def whole_lines(head: str) -> str:
    """A cut's head (a file's text shortened to what fits) to its last whole line, when it
    holds one: a run of whole lines, never a line cut in two."""
    end = head.rfind("\n")
    return head[:end] if end > 0 else head


# A line long enough to say which line it is (a bare `return`, `)` or `else:` is in every
# file), and the share of a result's lines a later result must show for it to be shown again.
MIN_LINE = 12
AGAIN_SHARE = 0.8


def shown_lines(text: str) -> frozenset[str]:
    """The distinct lines `text` shows, numbers and indentation off (an edit above a
    window renumbers its lines, a later view of it shows the same ones)."""
    out: set[str] = set()
    for line in text.splitlines():
        found = _NUMBERED.match(line)
        body = (line[found.end() :] if found else line).strip()
        if len(body) >= MIN_LINE:
            out.add(body)
    return frozenset(out)


def shown_again(texts: Sequence[str]) -> list[bool]:
    """Per text (units' results, in conversation order): whether later ones show at least
    AGAIN_SHARE of its lines again (the same window, the same test output since)."""
    later: set[str] = set()
    again: list[bool] = []
    for text in reversed(texts):
        lines = shown_lines(text)
        again.append(bool(lines) and len(lines & later) >= AGAIN_SHARE * len(lines))
        later |= lines
    return again[::-1]
