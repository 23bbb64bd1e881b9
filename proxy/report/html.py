"""Report dashboard: one self-contained HTML page with inline SVG charts, no scripts."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

from proxy.report.format import cell_text

PALETTE = (
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
)  # fmt: skip
TOP_TEAMS = 9  # stacked series; the rest are summed as "other"
TOP_MODELS = 10
WARN, CRIT = 0.80, 0.90  # the default thresholds, marked on the utilization chart
W, H = 960, 320  # chart view box
ML, MR, MT, MB = 70, 20, 20, 50  # margins: left, right, top, bottom
DAY_SLOT_MAX = 64  # a day's bar is at most 0.8 of this wide, however few days there are

CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;
background:#fafafa}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.sub{color:#666;margin-bottom:16px}
.cards{display:flex;gap:12px;flex-wrap:wrap}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px 16px;min-width:130px}
.card b{display:block;font-size:20px}
svg{background:#fff;border:1px solid #ddd;border-radius:6px;width:100%;max-width:960px;height:auto}
svg text{font-size:12px;fill:#444}svg text.at{font-size:13px;fill:#222;font-weight:600}
.grid{stroke:#e5e5e5}.axis{stroke:#999}
.legend{display:flex;flex-wrap:wrap;gap:12px;margin:6px 0}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
table{border-collapse:collapse;background:#fff;font-size:12px}
th,td{border:1px solid #ddd;padding:3px 5px;text-align:right}
th{background:#f0f0f0;white-space:normal;vertical-align:bottom}
td.k,th.k{text-align:left}td{white-space:nowrap}tr.total td{font-weight:bold;background:#f6f6f6}
td.k{white-space:normal;overflow-wrap:anywhere;max-width:160px}
"""


def human(n: float) -> str:
    """1234567 -> 1.23M, 750000 -> 750k: axis and card labels, three significant digits."""
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")):
        if abs(n) >= factor or factor == 1.0:
            v = n / factor
            digits = 0 if abs(v) >= 100 else 1 if abs(v) >= 10 else 2
            text = f"{v:.{digits}f}"
            return (text.rstrip("0").rstrip(".") if "." in text else text) + suffix
    return str(n)  # unreachable: the last factor always matches


def nice_max(v: float) -> float:
    """The smallest round number (1, 1.2, 1.5, 2, ... x 10^k) at or above `v`, for gridlines."""
    if v <= 0:
        return 1.0
    # Below 1 (dollars, shares) the step is a power of ten below 1, not 1 itself.
    base = 10 ** (len(str(int(v))) - 1) if v >= 1 else 10.0 ** math.floor(math.log10(v))
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8):
        if m * base >= v:
            return float(m * base)
    return float(10 * base)


def _svg(chart_id: str, title: str, body: list[str], height: int = H) -> str:
    return (
        f'<svg id="{chart_id}" class="chart" viewBox="0 0 {W} {height}" role="img" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>{"".join(body)}</svg>'
    )


def axis_titles(x: str, y: str, height: int = H, bottom: int = MB) -> list[str]:
    """Axis titles: `x` centred under the plot, `y` rotated along the left edge."""
    cx, cy = ML + (W - ML - MR) / 2, MT + (height - MT - bottom) / 2
    return [
        f'<text class="at" x="{cx:.0f}" y="{height - 8}" text-anchor="middle">{escape(x)}</text>',
        f'<text class="at" x="14" y="{cy:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {cy:.0f})">{escape(y)}</text>',
    ]


def y_grid(vmax: float, fmt: Any = human) -> list[str]:
    out = []
    for i in range(5):
        v = vmax * i / 4
        y = H - MB - (H - MT - MB) * i / 4
        out.append(f'<line class="grid" x1="{ML}" x2="{W - MR}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text x="{ML - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt(v)}</text>')
    return out


def _empty(chart_id: str, title: str) -> str:
    msg = f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle">no data</text>'
    return _svg(chart_id, title, [msg])


def tokens_per_day(day_team: Mapping[str, Mapping[str, int]]) -> tuple[str, list[str]]:
    """Stacked bars: total tokens per UTC day, one colour per team. (svg, legend teams)"""
    return stacked_per_day(
        "chart-tokens-per-day", "Tokens per day per team", day_team, "tokens",
        lambda n: f"{n:,} tokens",
    )  # fmt: skip


def stacked_per_day(
    chart_id: str,
    title: str,
    day_team: Mapping[str, Mapping[str, float]],
    y_title: str,
    describe: Callable[[Any], str],
    grid: Callable[[float], str] = human,
) -> tuple[str, list[str]]:
    """Stacked bars: a figure per UTC day, one colour per team. (svg, legend teams)"""
    if not day_team:
        return _empty(chart_id, title), []
    team_totals: dict[str, float] = {}
    for per in day_team.values():
        for team, n in per.items():
            team_totals[team] = team_totals.get(team, 0) + n
    ranked = sorted(team_totals, key=lambda t: (-team_totals[t], t))
    teams = ranked[:TOP_TEAMS] + (["other"] if len(ranked) > TOP_TEAMS else [])
    days = sorted(day_team)
    vmax = nice_max(max(sum(per.values()) for per in day_team.values()))
    slot = min((W - ML - MR) / len(days), DAY_SLOT_MAX)  # one day: a bar, not a wall
    scale = (H - MT - MB) / vmax
    body = y_grid(vmax, grid)
    for i, day in enumerate(days):
        x, y = ML + i * slot + slot * 0.1, float(H - MB)
        for j, team in enumerate(teams):
            per = day_team[day]
            n = (
                sum(v for t, v in per.items() if t not in teams[:TOP_TEAMS])
                if team == "other"
                else per.get(team, 0)
            )
            if n <= 0:
                continue
            h = n * scale
            y -= h
            body.append(
                f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{slot * 0.8:.1f}" '
                f'height="{h:.1f}" fill="{PALETTE[j % len(PALETTE)]}">'
                f"<title>{escape(day)} {escape(team)}: {describe(n)}</title></rect>"
            )
        if i % max(1, len(days) // 12) == 0:
            cx = ML + (i + 0.5) * slot
            body.append(
                f'<text x="{cx:.1f}" y="{H - MB + 18}" text-anchor="middle">'
                f"{escape(day[5:])}</text>"
            )
    body.append(f'<line class="axis" x1="{ML}" x2="{W - MR}" y1="{H - MB}" y2="{H - MB}"/>')
    body += axis_titles("UTC day (month-day)", y_title)
    return _svg(chart_id, title, body), teams


def utilization(hist: Sequence[int], bin_width: float, util_max: float = 0.0) -> str:
    """Histogram of tokens_before / budget, coloured by the default warning levels.

    The last bin holds everything from its lower edge up: it is labelled "≥ 1.5" and its
    count and the highest value seen are written on the chart, so overflow is never hidden.
    """
    title = "Utilization distribution (tokens before trimming / budget)"
    if not any(hist):
        return _empty("chart-utilization", title)
    vmax = nice_max(max(hist))
    slot = (W - ML - MR) / len(hist)
    scale = (H - MT - MB) / vmax
    body = y_grid(vmax, lambda v: f"{v:,.0f}")
    for i, n in enumerate(hist):
        lo = i * bin_width
        colour = "#e15759" if lo >= CRIT - 1e-9 else "#f28e2b" if lo >= WARN - 1e-9 else "#4e79a7"
        label = f"≥ {lo:.2f}" if i == len(hist) - 1 else f"{lo:.2f}–{lo + bin_width:.2f}"
        h = max(n * scale, 2.0) if n else 0.0  # one request still shows as a sliver
        body.append(
            f'<rect class="bar" x="{ML + i * slot + 1:.1f}" y="{H - MB - h:.1f}" '
            f'width="{slot - 2:.1f}" height="{h:.1f}" fill="{colour}">'
            f"<title>{label}: {n:,} requests</title></rect>"
        )
        if i == len(hist) - 1:
            cx = ML + (i + 0.5) * slot
            body.append(
                f'<text id="util-overflow" x="{cx:.1f}" y="{H - MB - h - 6:.1f}" '
                f'text-anchor="end">{n:,} at ≥ {lo:.1f} (max {util_max:.2f})</text>'
                f'<text x="{cx:.1f}" y="{H - MB + 18}" text-anchor="middle">≥{lo:.1f}</text>'
            )
        elif i % 2 == 0:
            body.append(
                f'<text x="{ML + i * slot:.1f}" y="{H - MB + 18}" text-anchor="middle">'
                f"{lo:.1f}</text>"
            )
    for value, name in ((WARN, "warning"), (CRIT, "critical")):
        x = ML + value / bin_width * slot
        ty = MT + (26 if name == "critical" else 12)  # stagger: the two lines are close
        body.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{MT}" y2="{H - MB}" stroke="#333" '
            f'stroke-dasharray="4 3"/><text x="{x + 4:.1f}" y="{ty}">{name} {value:.2f}</text>'
        )
    body.append(f'<line class="axis" x1="{ML}" x2="{W - MR}" y1="{H - MB}" y2="{H - MB}"/>')
    body += axis_titles("utilization: tokens before trimming / budget", "requests")
    return _svg("chart-utilization", title, body)


def top_models(model_tokens: Mapping[str, int]) -> str:
    """Horizontal bars: the models with the most tokens."""
    title = f"Top {TOP_MODELS} models by tokens"
    used = (kv for kv in model_tokens.items() if kv[1] > 0)  # a model at 0 tokens is noise
    ranked = sorted(used, key=lambda kv: (-kv[1], kv[0]))[:TOP_MODELS]
    if not ranked or ranked[0][1] <= 0:
        return _empty("chart-top-models", title)
    left, row = 240, 30.0
    scale = (W - left - 90) / ranked[0][1]
    height = int(MT * 2 + row * len(ranked)) + 30  # room for the x-axis title
    body = axis_titles("tokens", "model", height, bottom=MT + 30)
    for i, (model, n) in enumerate(ranked):
        y = MT + i * row
        name = model if len(model) <= 30 else model[:29] + "…"
        width, ty = max(n * scale, 1.0), y + row * 0.6
        body.append(
            f'<text x="{left - 8}" y="{ty:.1f}" text-anchor="end">{escape(name)}</text>'
            f'<rect class="bar" x="{left}" y="{y + row * 0.15:.1f}" width="{width:.1f}" '
            f'height="{row * 0.7:.1f}" fill="{PALETTE[i % len(PALETTE)]}">'
            f"<title>{escape(model)}: {n:,} tokens</title></rect>"
            f'<text x="{left + width + 6:.1f}" y="{ty:.1f}">{human(n)}</text>'
        )
    return _svg("chart-top-models", title, body, height=height)


def _table(by: Sequence[str], rows: Sequence[Mapping[str, Any]], total: Mapping[str, Any]) -> str:
    cols = [*by, *(k for k in total)]
    # Headers wrap at their words (`completion tokens`): 18 columns fit a 1,400 px window.
    head = "".join(
        f'<th class="{"k" if c in by else ""}">{escape(c.replace("_", " "))}</th>' for c in cols
    )

    def cell(c: str, v: Any) -> str:
        return f'<td class="{"k" if c in by else ""}">{escape(cell_text(c, v))}</td>'

    body = ["<tr>" + "".join(cell(c, r.get(c)) for c in cols) + "</tr>" for r in rows]
    tot = {**dict.fromkeys(by, ""), **total, **({by[0]: "TOTAL"} if by else {})}
    body.append('<tr class="total">' + "".join(cell(c, tot.get(c)) for c in cols) + "</tr>")
    return (
        f'<table id="totals"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


def render_page(
    *,
    source: str,
    by: Sequence[str],
    rows: Sequence[Mapping[str, Any]],
    total: Mapping[str, Any],
    day_team_tokens: Mapping[str, Mapping[str, int]],
    util_hist: Sequence[int],
    util_bin: float,
    model_tokens: Mapping[str, int],
    util_max: float = 0.0,
    panels: str = "",
) -> str:
    """The whole dashboard as one HTML string: inline CSS and SVG, nothing fetched."""
    chart_days, teams = tokens_per_day(day_team_tokens)
    legend = "".join(
        f'<span><i style="background:{PALETTE[j % len(PALETTE)]}"></i>{escape(t)}</span>'
        for j, t in enumerate(teams)
    )
    p50, p95 = total.get("p50_ms"), total.get("p95_ms")
    cost, saved = total.get("cost_usd"), total.get("saved_usd")
    cards = [
        ("requests", f"{total.get('requests', 0):,}"),
        ("total tokens", human(total.get("total_tokens", 0))),
        ("trimmed", f"{total.get('trimmed_share', 0.0):.1%}"),
        ("tokens removed", human(total.get("tokens_removed", 0))),
        ("warnings / critical", f"{total.get('warnings', 0):,} / {total.get('critical', 0):,}"),
        ("errors", f"{total.get('errors', 0):,}"),
        ("p50 / p95 latency", f"{'-' if p50 is None else f'{p50:,.0f}'} / "
         f"{'-' if p95 is None else f'{p95:,.0f}'} ms"),
        ("prompt tokens from cache", f"{total.get('cached_share', 0.0):.1%}"),
        ("est. cost / saved", "-" if cost is None else f"${cost:,.2f} / ${saved or 0:,.2f}"),
    ]  # fmt: skip
    card_html = "".join(f'<div class="card">{k}<b>{escape(v)}</b></div>' for k, v in cards)
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>context-proxy usage</title><style>{CSS}</style></head><body>"
        f'<h1>context-proxy usage</h1><div class="sub">{escape(source)} · generated {made}</div>'
        f'<div class="cards">{card_html}</div>'
        f'<h2>Tokens per day per team</h2><div class="legend">{legend}</div>{chart_days}'
        f"<h2>Utilization distribution</h2>{utilization(util_hist, util_bin, util_max)}"
        f"<h2>Top models</h2>{top_models(model_tokens)}"
        f"{panels}"
        f"<h2>Totals by {escape(', '.join(by))}</h2>{_table(by, rows, total)}"
        "</body></html>\n"
    )
