"""Report output: the totals as an aligned table, CSV or JSON."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

import orjson

# fmt: off
COLUMNS = (
    "requests", "errors", "prompt_tokens", "completion_tokens", "total_tokens", "trimmed",
    "trimmed_share", "tokens_removed", "warnings", "critical", "p50_ms", "p95_ms",
)
# fmt: on
# The table leaves out what CSV and JSON carry for spreadsheets (trimmed count, critical).
TABLE_COLUMNS = tuple(c for c in COLUMNS if c not in {"trimmed", "critical"})


def format_table(by: Sequence[str], rows: list[dict[str, Any]], total: dict[str, Any]) -> str:
    """An aligned text table: group columns left-aligned, numbers right-aligned."""
    headers = [*by, *TABLE_COLUMNS]
    total_row = {**dict.fromkeys(by, ""), **total}
    if by:
        total_row[by[0]] = "TOTAL"
    cells = [[_cell(h, r.get(h)) for h in headers] for r in [*rows, total_row]]
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


def _cell(column: str, value: Any) -> str:
    if value is None:
        return "-"
    if column == "trimmed_share":
        return f"{value:.1%}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def format_csv(by: Sequence[str], rows: list[dict[str, Any]]) -> str:
    """One row per group and no total row, so a spreadsheet can sum the columns itself."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[*by, *COLUMNS], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def format_json(
    by: Sequence[str], rows: list[dict[str, Any]], total: dict[str, Any], skipped: int = 0
) -> str:
    """`{"by": [...], "groups": [...], "total": {...}, "skipped_lines": n}`."""
    doc = {"by": list(by), "groups": rows, "total": total, "skipped_lines": skipped}
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n"
