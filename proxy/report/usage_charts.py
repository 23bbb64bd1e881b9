"""Dashboard charts of requests: utilization (each team's own thresholds marked) and the
top models by tokens, with failed requests shown apart from them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from proxy.report.html import MB, ML, MR, MT, H, W, axis_titles, empty, human, nice_max, svg, y_grid
from proxy.report.team_colours import TeamColours

TOP_MODELS = 10
BAR_COLOUR, FAILED_COLOUR = "#4e79a7", "#9d9d9d"
MAX_NAMED = 3  # teams named beside a threshold line; more are counted


def utilization(
    hist: Sequence[int],
    bin_width: float,
    util_max: float = 0.0,
    thresholds: Mapping[tuple[float, float], Sequence[str]] | None = None,
    colours: TeamColours | None = None,
) -> str:
    """Histogram of tokens_before / budget, with each team's warning and critical lines
    (one pair per distinct setting, named by its teams, in the first team's colour).

    The last bin holds everything from its lower edge up: it is labelled "≥ 1.5" and its
    count and the highest value seen are written on the chart, so overflow is never hidden.
    """
    title = "Utilization distribution (tokens before trimming / budget)"
    if not any(hist):
        return empty("chart-utilization", title)
    vmax = nice_max(max(hist))
    slot = (W - ML - MR) / len(hist)
    scale = (H - MT - MB) / vmax
    body = y_grid(vmax, lambda v: f"{v:,.0f}")
    for i, n in enumerate(hist):
        lo = i * bin_width
        label = f"≥ {lo:.2f}" if i == len(hist) - 1 else f"{lo:.2f}–{lo + bin_width:.2f}"
        h = max(n * scale, 2.0) if n else 0.0  # one request still shows as a sliver
        body.append(
            f'<rect class="bar" x="{ML + i * slot + 1:.1f}" y="{H - MB - h:.1f}" '
            f'width="{slot - 2:.1f}" height="{h:.1f}" fill="{BAR_COLOUR}">'
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
    row = 0
    for (warning, critical), teams in sorted((thresholds or {(0.8, 0.9): []}).items()):
        more = f" +{len(teams) - MAX_NAMED}" if len(teams) > MAX_NAMED else ""
        named = ", ".join(teams[:MAX_NAMED]) + more
        stroke = colours.colour(teams[0]) if colours is not None and teams else "#333"
        for value, name in ((warning, "warning"), (critical, "critical")):
            x, ty = ML + value / bin_width * slot, MT + 12 + 14 * row
            row += 1
            who = f" ({named})" if named else ""
            body.append(
                f'<line class="threshold" x1="{x:.1f}" x2="{x:.1f}" y1="{MT}" y2="{H - MB}" '
                f'stroke="{stroke}" stroke-width="2" stroke-dasharray="5 3" '
                f'data-teams="{escape(",".join(teams))}" data-level="{name}" '
                f'data-value="{value:.2f}"/><text x="{x + 4:.1f}" y="{ty}">'
                f"{escape(f'{name} {value:.2f}{who}')}</text>"
            )
    body.append(f'<line class="axis" x1="{ML}" x2="{W - MR}" y1="{H - MB}" y2="{H - MB}"/>')
    body += axis_titles("utilization: tokens before trimming / budget", "requests")
    return svg("chart-utilization", title, body)


def top_models(model_tokens: Mapping[str, int], failed: str = "(failed requests)") -> str:
    """Horizontal bars: the models with the most tokens; below a gap, apart from them and
    in grey, the tokens of failed requests (whatever model they named)."""
    title = f"Top {TOP_MODELS} models by tokens (failed requests apart)"
    used = (kv for kv in model_tokens.items() if kv[1] > 0 and kv[0] != failed)
    ranked = sorted(used, key=lambda kv: (-kv[1], kv[0]))[:TOP_MODELS]
    failures = model_tokens.get(failed, 0)
    if not ranked and failures <= 0:
        return empty("chart-top-models", title)
    left, row = 240, 30.0
    rows = [*ranked, *([("", 0), (failed, failures)] if failures > 0 else [])]
    scale = (W - left - 90) / max(n for _, n in rows)
    height = int(MT * 2 + row * len(rows)) + 30  # room for the x-axis title
    body = axis_titles("tokens", "model", height, bottom=MT + 30)
    for i, (model, n) in enumerate(rows):
        if not model:
            continue  # the gap before the failures
        y = MT + i * row
        name = model if len(model) <= 30 else model[:29] + "…"
        width, ty = max(n * scale, 1.0), y + row * 0.6
        colour = FAILED_COLOUR if model == failed else BAR_COLOUR  # models: not teams' colours
        body.append(
            f'<text x="{left - 8}" y="{ty:.1f}" text-anchor="end">{escape(name)}</text>'
            f'<rect class="bar" x="{left}" y="{y + row * 0.15:.1f}" width="{width:.1f}" '
            f'height="{row * 0.7:.1f}" fill="{colour}">'
            f"<title>{escape(model)}: {n:,} tokens</title></rect>"
            f'<text x="{left + width + 6:.1f}" y="{ty:.1f}">{human(n)}</text>'
        )
    return svg("chart-top-models", title, body, height=height)
