"""Dashboard charts by UTC day: stacked bars, one colour per team (team_colours.py), below
the zero line for figures that can be negative (savings that cost more than they saved)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from html import escape
from typing import Any

from proxy.report.html import (
    DAY_SLOT_MAX,
    MB,
    ML,
    MR,
    MT,
    H,
    W,
    axis_titles,
    empty,
    human,
    nice_max,
)
from proxy.report.html import svg as svg_chart
from proxy.report.team_colours import TeamColours, grouped


def tokens_per_day(
    day_team: Mapping[str, Mapping[str, int]], colours: TeamColours | None = None
) -> tuple[str, list[str]]:
    """Stacked bars: total tokens per UTC day, one colour per team. (svg, legend teams)"""
    return stacked_per_day(
        "chart-tokens-per-day", "Tokens per day per team", day_team, "tokens",
        lambda n: f"{n:,} tokens", colours=colours,
    )  # fmt: skip


def stacked_per_day(
    chart_id: str,
    title: str,
    day_team: Mapping[str, Mapping[str, float]],
    y_title: str,
    describe: Callable[[Any], str],
    grid: Callable[[float], str] = human,
    colours: TeamColours | None = None,
) -> tuple[str, list[str]]:
    """Stacked bars: a figure per UTC day and team, positive ones up from the zero line,
    negative ones down from it. (svg, the legend's teams)"""
    if colours is None:
        totals: dict[str, float] = {}
        for per in day_team.values():
            for team, n in per.items():
                totals[team] = totals.get(team, 0) + abs(n)
        colours = TeamColours.ranked(totals)
    days = sorted(day_team)
    series = {day: grouped(day_team[day], colours) for day in days}
    teams = colours.order(t for per in series.values() for t, n in per.items() if n)
    if not teams:
        return empty(chart_id, title), []
    top = max(sum(n for n in per.values() if n > 0) for per in series.values())
    bottom = max(-sum(n for n in per.values() if n < 0) for per in series.values())
    span = nice_max(top + bottom) if top > 0 and bottom > 0 else nice_max(max(top, bottom))
    scale = (H - MT - MB) / span
    zero = H - MB - bottom * scale  # the bottom axis when nothing is negative
    body = _grid(span, zero, scale, grid)
    slot = min((W - ML - MR) / len(days), DAY_SLOT_MAX)  # one day: a bar, not a wall
    for i, day in enumerate(days):
        x, up, down = ML + i * slot + slot * 0.1, zero, zero
        for team in teams:
            n = series[day].get(team, 0)
            if not n:
                continue
            h = abs(n) * scale
            if n > 0:
                up -= h
            y = up if n > 0 else down
            if n < 0:
                down += h
            body.append(
                f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{slot * 0.8:.1f}" '
                f'height="{h:.1f}" fill="{colours.colour(team)}" data-team="{escape(team)}">'
                f"<title>{escape(day)} {escape(team)}: {describe(n)}</title></rect>"
            )
        if i % max(1, len(days) // 12) == 0:
            body.append(
                f'<text x="{ML + (i + 0.5) * slot:.1f}" y="{H - MB + 18}" text-anchor="middle">'
                f"{escape(day[5:])}</text>"
            )
    body.append(f'<line class="axis" x1="{ML}" x2="{W - MR}" y1="{zero:.1f}" y2="{zero:.1f}"/>')
    body += axis_titles("UTC day (month-day)", y_title)
    return svg_chart(chart_id, title, body), teams


def _grid(span: float, zero: float, scale: float, fmt: Callable[[float], str]) -> list[str]:
    """Gridlines a quarter of the span apart, through the zero line."""
    out, step = [], span / 4
    first = -int((H - MB - zero) / scale / step + 1e-9)
    for k in range(first, first + 5):
        y = zero - k * step * scale
        if y < MT - 0.5 or y > H - MB + 0.5:
            continue
        out.append(f'<line class="grid" x1="{ML}" x2="{W - MR}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text x="{ML - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt(k * step)}</text>')
    return out
