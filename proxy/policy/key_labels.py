"""Key labels: what `keys new` accepts, and how `keys list` shows any text from a file.

A label is read back on a terminal, one row per key. A control character (a newline
starts a forged row, an escape sequence rewrites the screen), a format character (a bidi
override shows the row's text in another order, a zero-width space hides a difference)
or a lone surrogate (which no terminal encoding can print) is refused when a key is
made, and shown as an escape when a file written by hand holds one.
"""

from __future__ import annotations

import unicodedata

from proxy.policy.key_edit import KeyEditError

MAX_LABEL = 100  # characters a label may have; `keys list` cuts longer ones it reads
# Categories never printed as they are: controls, formats (bidi, zero-width), surrogates,
# private use, unassigned, line and paragraph separators.
_UNPRINTABLE = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))


class LabelError(KeyEditError):
    """A label `keys new` will not write."""


def checked_label(label: str) -> str:
    """`label` if it is one line of printable text within MAX_LABEL characters."""
    if len(label) > MAX_LABEL:
        raise LabelError(f"a label is at most {MAX_LABEL} characters (this one has {len(label)})")
    bad = next((c for c in label if unicodedata.category(c) in _UNPRINTABLE), None)
    if bad is not None:
        raise LabelError(
            f"a label is one line of printable text; it holds {_escaped(bad)} "
            f"({unicodedata.name(bad, 'a control or unassigned character').lower()})"
        )
    return label


def shown(text: str, width: int = 0, limit: int = MAX_LABEL) -> str:
    """`text` as one printable cell: escapes for what must not print, cut at `limit`
    columns, padded to `width` columns (a wide character takes two)."""
    # A label written with JSON's escapes reads as two surrogate halves: join them.
    text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    cells: list[str] = []
    columns = 0
    for char in text:
        cell = _escaped(char) if unicodedata.category(char) in _UNPRINTABLE else char
        size = sum(_columns(c) for c in cell)
        if columns + size > limit:
            cells.append("…")
            columns += 1
            break
        cells.append(cell)
        columns += size
    return "".join(cells) + " " * max(0, width - columns)


def _escaped(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _columns(char: str) -> int:
    """How many terminal columns `char` takes: 0 for a combining mark, 2 for a wide one."""
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
