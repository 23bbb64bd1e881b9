"""Tag attributes: a `<context ...>` tag's `name=value` pairs, read in one pass over the text.

Equal to the pattern `([A-Za-z_][\\w-]*)\\s*=\\s*("[^"]*"|'[^']*'|[^\\s"'>]+)` found left to
right, but linear: a regex engine retries that pattern at every letter of a name that is not
followed by `=` (20 KB of letters: 13 s); here a name that fails is skipped whole, since every
later start inside it reaches the same end and fails the same way.
"""

from __future__ import annotations

import re

_RUN = re.compile(r"[\w-]*")  # one pass to the end of a name; never backtracks
_SPACE = re.compile(r"\s*")
_UNQUOTED = re.compile(r"""[^\s"'>]+""")
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")


def _past(pattern: re.Pattern[str], source: str, pos: int) -> int:
    """Where a run of `pattern` (which may be empty) starting at `pos` ends."""
    m = pattern.match(source, pos)
    return m.end() if m is not None else pos


def _value(source: str, k: int, last: dict[str, int]) -> tuple[str, int] | None:
    """The value starting at `k` and where it ends, or None when there is none."""
    if k >= len(source):
        return None
    quote = source[k]
    if quote in last:
        # Only looked for when it exists: a missing close quote never costs a scan.
        if last[quote] <= k:
            return None
        close = source.find(quote, k + 1)
        return source[k + 1 : close], close + 1
    m = _UNQUOTED.match(source, k)
    return (m.group(), m.end()) if m is not None else None


def parse_attrs(source: str) -> tuple[dict[str, str], list[str]]:
    """The attributes (first of each name wins, names lowercased) and the problems found."""
    attrs: dict[str, str] = {}
    rest: list[str] = []
    last = {'"': source.rfind('"'), "'": source.rfind("'")}
    n = len(source)
    gap = i = 0
    while i < n:
        if source[i] not in _NAME_START:
            i += 1
            continue
        name_end = _past(_RUN, source, i + 1)
        eq = _past(_SPACE, source, name_end)
        if eq < n and source[eq] == "=":
            found = _value(source, _past(_SPACE, source, eq + 1), last)
            if found is not None:
                attrs.setdefault(source[i:name_end].lower(), found[0])
                rest.append(source[gap:i])
                gap = i = found[1]
                continue
        i = name_end
    rest.append(source[gap:])
    left = "".join(rest).strip()
    return attrs, ([f"unreadable text in a <context> tag: {left[:40]!r}"] if left else [])
