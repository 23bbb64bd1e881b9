"""Report dashboard: the quota panel and the errors-by-kind panel (inline SVG and tables)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from proxy.report.html import MT, W, axis_titles, human
from proxy.report.tally import Tally
from proxy.report.team_colours import DEFAULT_THRESHOLDS, PALETTE, TeamColours

LEFT, RIGHT, ROW = 200, 110, 26.0  # name column, value labels, bar row height
TOP_KINDS = 9  # coloured error kinds; the rest are summed as "other"
LEVEL_COLOUR = {"normal": "#4e79a7", "warning": "#f28e2b", "critical": "#e15759"}


def svg_frame(chart_id: str, title: str, body: list[str], height: int) -> str:
    return (
        f'<svg id="{chart_id}" class="chart" viewBox="0 0 {W} {height}" role="img" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>{"".join(body)}</svg>'
    )


def no_data_chart(chart_id: str, title: str, text: str) -> str:
    msg = f'<text x="{W / 2}" y="40" text-anchor="middle">{escape(text)}</text>'
    return svg_frame(chart_id, title, [msg], 70)


def _name(text: str) -> str:
    return escape(text if len(text) <= 26 else text[:25] + "…")


def quota_chart(
    rows: Sequence[Mapping[str, Any]],
    thresholds: Mapping[str, tuple[float, float]] | None = None,
    colours: TeamColours | None = None,
) -> str:
    """Per team two bars, its newest day and that month: peak used / limit, coloured by
    level; on each bar's row the team's own warning and critical marks, and the team's
    colour as a swatch before its name."""
    title = "Quota used vs limit per team (newest day and its month; tokens and dollars)"
    if not rows:
        return no_data_chart("chart-quota", title, "no quota limits recorded in this log")
    span = max(1.0, *(float(r["share"]) for r in rows))  # over 100% stays on the chart
    scale = (W - LEFT - RIGHT) / span
    height = int(MT * 2 + ROW * len(rows)) + 50
    body = axis_titles("share of the quota limit (tokens or $)", "team", height, MT + 50)
    for i, r in enumerate(rows):
        y, share = MT + i * ROW, float(r["share"])
        width = max(share * scale, 1.0)
        label = f"{r['team']} · {_period(r)}"
        team = str(r["team"])
        swatch = colours.colour(colours.name(team)) if colours is not None else PALETTE[0]
        body.append(
            f'<text x="{LEFT - 22}" y="{y + ROW * 0.65:.1f}" '
            f'text-anchor="end">{_name(label)}</text>'
            f'<rect class="swatch" x="{LEFT - 16}" y="{y + ROW * 0.3:.1f}" width="10" height="10" '
            f'fill="{swatch}" data-team="{escape(team)}"/>'
            f'<rect class="bar" x="{LEFT}" y="{y + ROW * 0.15:.1f}" width="{width:.1f}" '
            f'height="{ROW * 0.7:.1f}" fill="{LEVEL_COLOUR.get(r["level"], PALETTE[0])}">'
            f"<title>{escape(label)} {escape(r['when'])}: {_amount(r, 'used')} of "
            f"{_amount(r, 'limit')} ({escape(r['level'])})</title></rect>"
            f'<text x="{LEFT + width + 6:.1f}" y="{y + ROW * 0.65:.1f}">{share:.0%}</text>'
        )
        warning, critical = (thresholds or {}).get(team, DEFAULT_THRESHOLDS)
        for value, level in ((warning, "warning"), (critical, "critical")):
            x = LEFT + value * scale
            body.append(
                f'<line class="threshold" x1="{x:.1f}" x2="{x:.1f}" y1="{y + 1:.1f}" '
                f'y2="{y + ROW - 1:.1f}" stroke="{LEVEL_COLOUR[level]}" stroke-width="2.5" '
                f'data-team="{escape(team)}" data-level="{level}" data-value="{value:.2f}">'
                f"<title>{escape(team)} {level} at {value:.0%}</title></line>"
            )
    bottom = MT + ROW * len(rows)
    x = LEFT + scale  # the limit itself
    body.append(
        f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{MT}" y2="{bottom:.1f}" stroke="#333" '
        f'stroke-dasharray="4 3"/><text x="{x:.1f}" y="{bottom + 16:.1f}" '
        'text-anchor="middle">100%</text>'
    )
    return svg_frame("chart-quota", title, body, height)


def _period(row: Mapping[str, Any]) -> str:
    """ "day" for a token quota, "day $" for a dollar one."""
    return f"{row['period']} $" if row.get("unit") == "usd" else str(row["period"])


def _amount(row: Mapping[str, Any], key: str) -> str:
    """The row's `used` or `limit`: "$12.35" for a dollar quota, "1,234 tokens" else."""
    value = row[key]
    return dollars(float(value)) if row.get("unit") == "usd" else f"{int(value):,} tokens"


def dollars(v: float) -> str:
    """$1,234 / $12.35 / $0.0123 / -$0.50: three significant digits below a dollar."""
    if v < 0:
        return "-" + dollars(-v)
    if v >= 100:
        return f"${v:,.0f}"
    return f"${v:,.2f}" if v >= 1 else f"${v:.3g}"


def _quota_table(rows: Sequence[Mapping[str, Any]]) -> str:
    head = "".join(
        f"<th{' class=k' if c in ('team', 'period', 'when', 'level') else ''}>{c}</th>"
        for c in ("team", "period", "when", "used", "limit", "share", "level")
    )
    body = "".join(
        f'<tr><td class="k">{escape(r["team"])}</td><td class="k">{_period(r)}</td>'
        f'<td class="k">{escape(r["when"])}</td><td>{_amount(r, "used")}</td>'
        f"<td>{_amount(r, 'limit')}</td>"
        f'<td>{r["share"]:.1%}</td><td class="k">{escape(r["level"])}</td></tr>'
        for r in rows
    )
    return f'<table id="quota"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def errors_chart(errors: Mapping[str, Mapping[str, int]]) -> tuple[str, list[str]]:
    """Stacked bars: errors per team, one colour per kind. (svg, legend kinds)"""
    title = "Errors per team by kind"
    totals: dict[str, int] = {}
    for per_team in errors.values():
        for kind, n in per_team.items():
            totals[kind] = totals.get(kind, 0) + n
    if not totals:
        return no_data_chart("chart-errors", title, "no errors recorded in this log"), []
    ranked = sorted(totals, key=lambda k: (-totals[k], k))
    kinds = ranked[:TOP_KINDS] + (["other"] if len(ranked) > TOP_KINDS else [])
    teams = sorted(errors, key=lambda t: (-sum(errors[t].values()), t))
    scale = (W - LEFT - RIGHT) / max(sum(errors[t].values()) for t in teams)
    height = int(MT * 2 + ROW * len(teams)) + 40
    body = axis_titles("errors (requests with an error or status ≥ 400)", "team", height, MT + 40)
    for i, team in enumerate(teams):
        y, x = MT + i * ROW, float(LEFT)
        body.append(
            f'<text x="{LEFT - 8}" y="{y + ROW * 0.65:.1f}" text-anchor="end">{_name(team)}</text>'
        )
        per = errors[team]
        for j, kind in enumerate(kinds):
            n = (
                sum(v for k, v in per.items() if k not in kinds[:TOP_KINDS])
                if kind == "other"
                else per.get(kind, 0)
            )
            if n <= 0:
                continue
            body.append(
                f'<rect class="bar" x="{x:.1f}" y="{y + ROW * 0.15:.1f}" width="{n * scale:.1f}" '
                f'height="{ROW * 0.7:.1f}" fill="{PALETTE[j % len(PALETTE)]}">'
                f"<title>{escape(team)} {escape(kind)}: {n:,}</title></rect>"
            )
            x += n * scale
        body.append(
            f'<text x="{x + 6:.1f}" y="{y + ROW * 0.65:.1f}">{human(sum(per.values()))}</text>'
        )
    return svg_frame("chart-errors", title, body, height), kinds


def _errors_table(errors: Mapping[str, Mapping[str, int]], kinds: list[str]) -> str:
    shown = [k for k in kinds if k != "other"]
    cols = [*shown, *(["other"] if len(kinds) > len(shown) else []), "total"]
    head = '<th class="k">team</th>' + "".join(f"<th>{escape(k)}</th>" for k in cols)
    rows = []
    for team in sorted(errors):
        per = errors[team]
        values = [per.get(k, 0) for k in shown]
        if "other" in cols:
            values.append(sum(v for k, v in per.items() if k not in shown))
        values.append(sum(per.values()))
        cells = "".join(f"<td>{v:,}</td>" for v in values)
        rows.append(f'<tr><td class="k">{escape(team)}</td>{cells}</tr>')
    return (
        f'<table id="errors"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def render(
    tally: Tally,
    thresholds: Mapping[str, tuple[float, float]] | None = None,
    colours: TeamColours | None = None,
) -> str:
    """Both panels as HTML sections for the dashboard page."""
    rows = tally.quota_rows()
    chart, kinds = errors_chart(tally.errors)
    legend = "".join(
        f'<span><i style="background:{PALETTE[j % len(PALETTE)]}"></i>{escape(k)}</span>'
        for j, k in enumerate(kinds)
    )
    return (
        '<h2>Quota</h2><div class="sub">On each bar, the team\'s own warning (orange) and '
        "critical (red) thresholds.</div>"
        f"{quota_chart(rows, thresholds, colours)}"
        f"{_quota_table(rows) if rows else ''}"
        f'<h2>Errors by kind</h2><div class="legend">{legend}</div>{chart}'
        f"{_errors_table(tally.errors, kinds) if kinds else ''}"
    )
