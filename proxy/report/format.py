"""Report output: the totals as an aligned table, CSV or JSON."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from typing import Any

import orjson

# fmt: off
COLUMNS = (
    "requests", "errors", "prompt_tokens", "completion_tokens", "total_tokens", "trimmed",
    "trimmed_share", "tokens_removed", "refused", "refused_tokens", "rate_limited", "warnings",
    "critical",
    "p50_ms", "p95_ms",
    "cached_tokens", "cached_share", "cost_usd", "saved_usd",
)
# fmt: on
# OWASP CSV injection: a cell starting with one of these is run as a formula by spreadsheets
# (full-width forms too, which some spreadsheets fold to ASCII).
_FORMULA_START = tuple("=+-@\t\r\n＝＋－＠")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
# ANSI escape sequences (CSI ... final byte, OSC ... BEL/ST), then any other C0/C1 control
# character or bidi override: team and model names come from clients and policies, and a
# table printed to a terminal must not recolour it, move the cursor or reorder the text.
_ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_]?)")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# The table leaves out what CSV and JSON carry for spreadsheets (trimmed count, cached
# token count: the share is shown).
# The terminal table leaves out what the dashboard's cards and CSV/JSON carry, to stay narrow.
TABLE_COLUMNS = tuple(c for c in COLUMNS if c not in {"trimmed", "cached_tokens", "rate_limited"})
SHARES = frozenset({"trimmed_share", "cached_share"})
DOLLARS = frozenset({"cost_usd", "saved_usd"})


def format_table(by: Sequence[str], rows: list[dict[str, Any]], total: dict[str, Any]) -> str:
    """An aligned text table: group columns left-aligned, numbers right-aligned."""
    headers = [*by, *TABLE_COLUMNS]  # fixed names: only the cells need cleaning
    total_row = {**dict.fromkeys(by, ""), **total}
    if by:
        total_row[by[0]] = "TOTAL"
    cells = [[cell_text(h, r.get(h)) for h in headers] for r in [*rows, total_row]]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]

    def line(values: list[str]) -> str:
        parts = [
            v.ljust(w) if i < len(by) else v.rjust(w)
            for i, (v, w) in enumerate(zip(values, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    body = [line(c) for c in cells[:-1]]
    return "\n".join([line(headers), rule, *body, rule, line(cells[-1])]) + "\n"


def cell_text(column: str, value: Any) -> str:
    """A value as the table and the dashboard show it: shares in %, dollars to 1/100 cent."""
    if value is None:
        return "-"
    if column in SHARES:
        return f"{value:.1%}"
    if column in DOLLARS:
        return f"{value:,.4f}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return printable(str(value))


def printable(text: str) -> str:
    """`text` without ANSI escape sequences, control characters or bidi overrides."""
    return _CONTROL.sub("", _ANSI.sub("", text))


def csv_safe(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula, prefixed with `'`; numbers unchanged.

    Number values and text that is a plain number (`-12`, `1.5e3`) stay as they are, so
    negative numbers still sum; `-1+2` or `=HYPERLINK(...)` become literal text.
    """
    if not isinstance(value, str) or not value.startswith(_FORMULA_START):
        return value
    if _NUMBER.fullmatch(value):
        return value
    return "'" + value


def format_csv(by: Sequence[str], rows: list[dict[str, Any]]) -> str:
    """One row per group and no total row, so a spreadsheet can sum the columns itself."""
    buf = io.StringIO()
    # Text cells are quoted (OWASP's advice, and the csv module does not quote a bare CR
    # under a "\n" line end, which would split a row in a spreadsheet); numbers stay bare.
    writer = csv.DictWriter(
        buf, fieldnames=[*by, *COLUMNS], lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC
    )
    writer.writeheader()
    writer.writerows({k: csv_safe(v) for k, v in row.items()} for row in rows)
    return buf.getvalue()


def format_json(
    by: Sequence[str], rows: list[dict[str, Any]], total: dict[str, Any], skipped: int = 0
) -> str:
    """`{"by": [...], "groups": [...], "total": {...}, "skipped_lines": n}`."""
    doc = {"by": list(by), "groups": rows, "total": total, "skipped_lines": skipped}
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n"
