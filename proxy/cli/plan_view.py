"""Plan view: the plan report as a table for a terminal, in colour when asked."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.planner import ItemReport, PlanReport

_COLOURS = {
    "keep": "32",  # green
    "truncate": "33",  # yellow
    "drop": "31",  # red
    "dedupe": "35",  # magenta
    "summarize": "36",  # cyan
    "summary-inserted": "34",  # blue
    "clear": "33",  # yellow: cut, but kept (an old tool result's placeholder)
    "compact": "32",  # green: kept, the same JSON without spaces
}
_RUN = 4  # this many alike items in a row or more are shown as one line


def _paint(text: str, code: str | None, color: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if color and code else text


def _table(rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return [
        "  ".join(
            cell.rjust(w) if c in right else cell.ljust(w)
            for c, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def _key(it: ItemReport) -> tuple[str, str, str, str]:
    return it.section, it.priority, it.action, it.kind


def _runs(items: Sequence[ItemReport]) -> list[tuple[ItemReport, ItemReport, int, int, int, str]]:
    """Consecutive alike items (same section, priority, action, kind) folded together."""
    out: list[tuple[ItemReport, ItemReport, int, int, int, str]] = []
    k = 0
    while k < len(items):
        first = items[k]
        j = k
        while j < len(items) and _key(items[j]) == _key(first):
            j += 1
        if j - k < _RUN:
            j = k + 1
        run = items[k:j]
        roles = {it.role for it in run}
        role = first.role if len(roles) == 1 else "mixed"
        before = sum(it.tokens for it in run)
        after = sum(it.tokens_after for it in run)
        out.append((first, run[-1], len(run), before, after, role))
        k = j
    return out


def render_plan(report: PlanReport, *, color: bool = False, collapse: bool = True) -> str:
    """Headline, a per-section table, then a per-item table (alike runs folded)."""
    window = f"{report.context_window:,}" if report.context_window is not None else "unknown"
    budget = f"{report.budget:,}" if report.budget is not None else "none (no trimming)"
    estimated = ", estimated" if report.estimated else ""
    lines = [
        f"Context window {window} · budget {budget} · tokens {report.tokens_before:,} → "
        f"{report.tokens_after:,} ({report.tokenizer}{estimated})",
        "",
    ]
    rows = [
        [
            "section",
            "priority",
            "reserved",
            "allocated",
            "wanted",
            "used",
            "kept",
            "dropped",
            "cut",
            "deduped",
            "summarized",
        ]
    ]
    cleared = any(s.cleared for s in report.sections)
    if cleared:  # a column only when some old tool result was cleared
        rows[0].append("cleared")
    for s in report.sections:
        reserved = f"{s.reserved:,}" if s.reserved is not None else "-"
        rows.append(
            [
                s.section,
                s.priority,
                reserved,
                f"{s.allocated:,}",
                f"{s.wanted:,}",
                f"{s.used:,}",
                str(s.kept),
                str(s.dropped),
                str(s.truncated),
                str(s.deduped),
                str(s.summarized),
                *([str(s.cleared)] if cleared else []),
            ]
        )
    lines += _table(rows, set(range(2, len(rows[0]))))
    lines.append("")
    rows = [["msg", "kind", "role", "section", "priority", "tokens", "after", "action", "reason"]]
    actions: list[str] = [""]
    runs = (
        _runs(report.items)
        if collapse
        else [(it, it, 1, it.tokens, it.tokens_after, it.role) for it in report.items]
    )
    for first, last, n, before, after, role in runs:
        where = str(first.message) if n == 1 else f"{first.message}-{last.message}"
        reason = first.reason if n == 1 else f"{n} items: {first.reason}"
        rows.append(
            [
                where,
                first.kind,
                role,
                first.section,
                first.priority,
                f"{before:,}",
                f"{after:,}",
                first.action,
                reason,
            ]
        )
        actions.append(first.action)
    for line, action in zip(_table(rows, {5, 6}), actions, strict=True):
        lines.append(_paint(line, _COLOURS.get(action), color))
    if report.problems:
        lines += ["", "Problems:"] + [f"  - {p}" for p in report.problems]
    return "\n".join(lines) + "\n"
