"""Tag attributes: a `<context ...>` tag's `name=value` pairs, read in one pass over the text.

The same reading as finding `([A-Za-z_][\\w-]*)\\s*=\\s*("[^"]*"|'[^']*'|[^\\s"'>]+)` left
to right, but linear: that search retries at every letter of a name not followed by `=`
(20 KB of letters: 13 s). Here a name is matched once, whole (possessive quantifiers: no
backtracking), with its value when it has one; a name without a value is passed over whole,
since every later start inside it reaches the same end and fails the same way. A quote
without its close fails only once per kind: no such quote comes after it.
"""

from __future__ import annotations

import re

_NAME_VALUE = re.compile(
    r"""([A-Za-z_][\w-]*+)(?:\s*+=\s*+(?:"([^"]*+)"|'([^']*+)'|([^\s"'>]++)))?"""
)


def parse_attrs(source: str) -> tuple[dict[str, str], list[str]]:
    """The attributes (first of each name wins, names lowercased) and the problems found."""
    attrs: dict[str, str] = {}
    rest: list[str] = []
    gap = 0
    for m in _NAME_VALUE.finditer(source):
        name, double, single, bare = m.groups()
        value = double if double is not None else single if single is not None else bare
        if value is None:
            continue  # a name alone is unreadable text, left in the gaps
        attrs.setdefault(name.lower(), value)
        rest.append(source[gap : m.start()])
        gap = m.end()
    rest.append(source[gap:])
    left = "".join(rest).strip()
    return attrs, ([f"unreadable text in a <context> tag: {left[:40]!r}"] if left else [])
