"""Report dashboard: one self-contained HTML page with inline SVG charts, no scripts.

Every chart that shows teams takes their colours from one TeamColours (team_colours.py),
so a team is the same colour everywhere; thresholds are each team's own, as its policy
says (read with `report --policies`), the defaults for a team no policy names."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any, Protocol

from proxy.policy import PolicyError, load_policy_dir
from proxy.report import panels, spend_panels
from proxy.report.day_charts import tokens_per_day
from proxy.report.format import TABLE_COLUMNS, cell_text
from proxy.report.html import CSS, human
from proxy.report.tally import Tally
from proxy.report.team_colours import TeamColours, threshold_sets
from proxy.report.usage_charts import top_models, utilization


class Aggregate(Protocol):
    """What the page reads of the report's totals (totals.Aggregate)."""

    by: tuple[str, ...]
    day_team_tokens: dict[str, dict[str, int]]
    model_tokens: dict[str, int]
    util_hist: list[int]
    util_max: float
    tally: Tally


def team_thresholds(folder: str | None) -> dict[str, tuple[float, float]]:
    """Each team's (warning, critical) from the policies in `folder` (default as `serve`
    finds them); none when there are none to read, or they do not load (said on stderr)."""
    path = folder or os.environ.get("CONTEXT_PROXY_POLICIES") or "./policies"
    if not os.path.isdir(path):
        if folder:
            print(f"context-proxy report: no policy folder {folder}", file=sys.stderr)
        return {}
    try:
        policies = load_policy_dir(path)
    except PolicyError as exc:
        print(f"context-proxy report: policies not read ({len(exc.problems)} problems); "
              "thresholds shown at 0.80/0.90", file=sys.stderr)  # fmt: skip
        return {}
    return {p.team: (p.thresholds.warning, p.thresholds.critical) for p in policies.all()}


def report_teams(agg: Aggregate) -> set[str]:
    """Every team any chart of the report shows."""
    teams = {team for per in agg.day_team_tokens.values() for team in per}
    return teams | {team for team, _ in agg.tally.spend} | set(agg.tally.errors)


def team_colours(agg: Aggregate, teams: set[str]) -> TeamColours:
    """The report's `teams` ranked by their tokens (every team any panel shows, also those
    with none: a team whose every request failed still has its colour)."""
    totals: dict[str, float] = {}
    for per in agg.day_team_tokens.values():
        for team, n in per.items():
            totals[team] = totals.get(team, 0) + n
    return TeamColours.ranked(totals, teams)


def render_page(
    agg: Aggregate,
    source: str,
    rows: Sequence[Mapping[str, Any]],
    total: Mapping[str, Any],
    thresholds: Mapping[str, tuple[float, float]],
    util_bin: float,
) -> str:
    """The whole dashboard as one HTML string: inline CSS and SVG, nothing fetched."""
    every = report_teams(agg)
    colours = team_colours(agg, every)
    chart_days, teams = tokens_per_day(agg.day_team_tokens, colours)
    sets = threshold_sets(thresholds, every)
    quota = panels.render(agg.tally, thresholds, colours)
    spend = spend_panels.render(agg.tally.spend, colours)
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>context-proxy usage</title><style>{CSS}</style></head><body>"
        f'<h1>context-proxy usage</h1><div class="sub">{escape(source)} · generated {made}</div>'
        f'<div class="cards">{_cards(total)}</div>'
        f"<h2>Teams</h2>{colours.legend()}"
        f"<h2>Tokens per day per team</h2>{colours.legend(teams)}{chart_days}"
        "<h2>Utilization distribution</h2>"
        f"{utilization(agg.util_hist, util_bin, agg.util_max, sets, colours)}"
        f"<h2>Top models</h2>{top_models(agg.model_tokens)}"
        f"{quota}{spend}"
        f"<h2>Totals by {escape(', '.join(agg.by))}</h2>{_table(agg.by, rows, total)}"
        "</body></html>\n"
    )


def _cards(total: Mapping[str, Any]) -> str:
    p50, p95 = total.get("p50_ms"), total.get("p95_ms")
    cost, saved = total.get("cost_usd"), total.get("saved_usd")
    saved_text = "-" if saved is None else (f"-${-saved:,.2f}" if saved < 0 else f"${saved:,.2f}")
    cards = [
        ("requests", f"{total.get('requests', 0):,}"),
        ("total tokens", human(total.get("total_tokens", 0))),
        ("trimmed (of those sent)", f"{total.get('trimmed_share', 0.0):.1%}"),
        ("tokens removed", human(total.get("tokens_removed", 0))),
        ("refused (never sent)", f"{total.get('refused', 0):,} · "
         f"{human(total.get('refused_tokens', 0))} tokens"),
        ("rate limited", f"{total.get('rate_limited', 0):,}"),
        ("warnings / critical", f"{total.get('warnings', 0):,} / {total.get('critical', 0):,}"),
        ("errors", f"{total.get('errors', 0):,}"),
        ("p50 / p95 latency", f"{'-' if p50 is None else f'{p50:,.0f}'} / "
         f"{'-' if p95 is None else f'{p95:,.0f}'} ms"),
        ("prompt tokens from cache", f"{total.get('cached_share', 0.0):.1%}"),
        ("est. cost / saved", "-" if cost is None else f"${cost:,.2f} / {saved_text}"),
    ]  # fmt: skip
    return "".join(
        f'<div class="card" id="card-{escape(k.split(" ")[0])}">{k}<b>{escape(v)}</b></div>'
        for k, v in cards
    )


def _table(by: Sequence[str], rows: Sequence[Mapping[str, Any]], total: Mapping[str, Any]) -> str:
    cols = [*by, *(k for k in TABLE_COLUMNS if k in total)]  # as the text table: CSV has all
    # Headers wrap at their words (`completion tokens`); a name cell never wraps (a long
    # one ends in an ellipsis, whole in its tooltip).
    head = "".join(
        f'<th class="{"k" if c in by else ""}">{escape(c.replace("_", " "))}</th>' for c in cols
    )

    def cell(c: str, v: Any) -> str:
        text = escape(cell_text(c, v))
        return f'<td class="k" title="{text}">{text}</td>' if c in by else f"<td>{text}</td>"

    body = ["<tr>" + "".join(cell(c, r.get(c)) for c in cols) + "</tr>" for r in rows]
    tot = {**dict.fromkeys(by, ""), **total, **({by[0]: "TOTAL"} if by else {})}
    body.append('<tr class="total">' + "".join(cell(c, tot.get(c)) for c in cols) + "</tr>")
    return (
        f'<table id="totals"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )
