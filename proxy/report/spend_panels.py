"""Report dashboard: the cache panel (share of prompt tokens served from cache per team and
day) and the cost panel (estimated cost and what trimming saved, per team and day)."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape

from proxy.report.day_charts import stacked_per_day
from proxy.report.html import MB, ML, MR, MT, H, W, axis_titles, y_grid
from proxy.report.panels import dollars, no_data_chart, svg_frame
from proxy.report.tally import Spend
from proxy.report.team_colours import TeamColours


def _by_team(spend: Mapping[tuple[str, str], Spend]) -> dict[str, Spend]:
    teams: dict[str, Spend] = {}
    for (team, _), s in spend.items():
        t = teams.setdefault(team, Spend())
        t.prompt, t.cached, t.priced = t.prompt + s.prompt, t.cached + s.cached, t.priced + s.priced
        t.cost, t.saved = t.cost + s.cost, t.saved + s.saved
    return teams


def cache_chart(
    spend: Mapping[tuple[str, str], Spend], colours: TeamColours
) -> tuple[str, list[str]]:
    """One line per team: cached / prompt tokens per UTC day. (svg, legend teams)"""
    title = "Share of prompt tokens served from the provider's cache, per team and day"
    teams = _by_team(spend)
    if not any(s.cached for s in teams.values()):
        return no_data_chart("chart-cache", title, "no cached tokens reported in this log"), []
    shown = colours.order(colours.name(t) for t, s in teams.items() if s.prompt)
    days = sorted({day for _, day in spend})
    series: dict[str, dict[str, Spend]] = {}
    for (team, day), s in spend.items():
        name = colours.name(team)
        cell = series.setdefault(name, {}).setdefault(day, Spend())
        cell.prompt, cell.cached = cell.prompt + s.prompt, cell.cached + s.cached
    slot = (W - ML - MR) / len(days)
    body = y_grid(1.0, lambda v: f"{v:.0%}")
    for team in shown:
        colour, points = colours.colour(team), []
        for i, day in enumerate(days):
            point = series.get(team, {}).get(day)
            if point is None or point.prompt <= 0:
                continue
            share = min(point.cached / point.prompt, 1.0)
            x, y = ML + (i + 0.5) * slot, H - MB - (H - MT - MB) * share
            points.append(f"{x:.1f},{y:.1f}")
            body.append(
                f'<circle class="pt" cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}" '
                f'data-team="{escape(team)}">'
                f"<title>{escape(day)} {escape(team)}: {share:.1%} of {point.prompt:,} prompt "
                f"tokens from cache</title></circle>"
            )
        if len(points) > 1:
            body.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                f'points="{" ".join(points)}"/>'
            )
    for i, day in enumerate(days):
        if i % max(1, len(days) // 12) == 0:
            body.append(
                f'<text x="{ML + (i + 0.5) * slot:.1f}" y="{H - MB + 18}" '
                f'text-anchor="middle">{escape(day[5:])}</text>'
            )
    body.append(f'<line class="axis" x1="{ML}" x2="{W - MR}" y1="{H - MB}" y2="{H - MB}"/>')
    body += axis_titles("UTC day (month-day)", "cached share of prompt tokens")
    return svg_frame("chart-cache", title, body, H), shown


def _cache_table(teams: Mapping[str, Spend]) -> str:
    head = (
        '<th class="k">team</th><th>prompt tokens</th><th>cached tokens</th><th>cached share</th>'
    )
    rows = "".join(
        f'<tr><td class="k">{escape(team)}</td><td>{s.prompt:,}</td><td>{s.cached:,}</td>'
        f"<td>{(s.cached / s.prompt if s.prompt else 0.0):.1%}</td></tr>"
        for team, s in sorted(teams.items())
    )
    return f'<table id="cache"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def cost_charts(
    spend: Mapping[tuple[str, str], Spend], colours: TeamColours
) -> tuple[str, list[str]]:
    """Stacked bars per day by team: estimated cost, then what trimming saved (below the
    zero line where trimming cost more than it saved: cache writes a cut caused)."""
    priced = [(key, s) for key, s in spend.items() if s.priced]
    if not priced:
        title = "Estimated cost per team and day"
        return no_data_chart("chart-cost", title, "no priced requests in this log"), []
    cost: dict[str, dict[str, float]] = {}
    saved: dict[str, dict[str, float]] = {}
    for (team, day), s in priced:
        cost.setdefault(day, {})[team] = s.cost
        saved.setdefault(day, {})[team] = s.saved
    cost_svg, teams = stacked_per_day(
        "chart-cost", "Estimated cost per team and day (as billed, at litellm's bundled prices)",
        cost, "estimated cost (USD)", dollars, dollars, colours,
    )  # fmt: skip
    saved_svg, more = stacked_per_day(
        "chart-saved", "What trimming saved per team and day: the untrimmed request's cost less "
        "the sent one's, at the cache shares reported (below zero: trimming cost more)",
        saved, "saved by trimming (USD)", dollars, dollars, colours,
    )  # fmt: skip
    return cost_svg + saved_svg, colours.order({*teams, *more})


def _cost_table(teams: Mapping[str, Spend]) -> str:
    cols = ("priced requests", "cost (USD)", "saved (USD)", "saved share")
    head = '<th class="k">team</th>' + "".join(f"<th>{c}</th>" for c in cols)
    rows = []
    for team, s in sorted(teams.items()):
        if not s.priced:
            continue
        untrimmed = s.cost + s.saved  # what the same requests would have cost untrimmed
        saved_share = s.saved / untrimmed if untrimmed else 0.0
        rows.append(
            f'<tr><td class="k">{escape(team)}</td><td>{s.priced:,}</td><td>{s.cost:,.4f}</td>'
            f"<td>{s.saved:,.4f}</td><td>{saved_share:.1%}</td></tr>"
        )
    return f'<table id="cost"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def render(spend: Mapping[tuple[str, str], Spend], colours: TeamColours | None = None) -> str:
    """Both panels as HTML sections for the dashboard page."""
    teams = _by_team(spend)
    if colours is None:
        colours = TeamColours.ranked({t: s.prompt for t, s in teams.items()})
    cache_svg, cache_teams = cache_chart(spend, colours)
    cost_svg, cost_teams = cost_charts(spend, colours)
    cached = sum(s.cached for s in teams.values())
    return (
        f"<h2>Prompt cache</h2>{colours.legend(cache_teams) if cache_teams else ''}{cache_svg}"
        f"{_cache_table(teams) if cached else ''}"
        f"<h2>Cost and savings</h2>{colours.legend(cost_teams) if cost_teams else ''}{cost_svg}"
        f"{_cost_table(teams) if cost_teams else ''}"
    )
