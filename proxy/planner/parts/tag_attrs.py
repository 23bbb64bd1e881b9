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

_NAME = r"[A-Za-z_][\w-]*+"
_PAIR = rf"""({_NAME})\s*+=\s*+(?:"([^"]*+)"|'([^']*+)'|([^\s"'>]++))"""
_PAIR_OR_WORD = re.compile(rf"{_PAIR}|(?P<word>{_NAME})")
_ONLY_PAIRS = re.compile(rf"\s*+(?:{_PAIR}\s*+)*+")  # each step has one way to go: no retries


def parse_attrs(source: str) -> tuple[dict[str, str], list[str]]:
    """The attributes (first of each name wins, names lowercased) and the problems found."""
    attrs: dict[str, str] = {}
    for name, double, single, bare, _ in _PAIR_OR_WORD.findall(source):
        if name:  # a pair; an empty value is an empty quoted one (a bare one is never empty)
            attrs.setdefault(name.lower(), double or single or bare)
    # What no pair covers is unreadable: pairs removed, lone names kept (an unmatched group
    # is replaced by nothing), from where the run of pairs that opens the text ends.
    run = _ONLY_PAIRS.match(source)
    end = run.end() if run is not None else 0
    left = _PAIR_OR_WORD.sub(r"\g<word>", source[end:]).strip() if end < len(source) else ""
    return attrs, ([f"unreadable text in a <context> tag: {left[:40]!r}"] if left else [])
