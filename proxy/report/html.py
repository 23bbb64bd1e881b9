"""Report dashboard primitives: the page's style, an SVG chart's frame, axes and grid, and
numbers as the charts label them (the page itself: dashboard.py)."""

from __future__ import annotations

import math
from html import escape
from typing import Any

W, H = 960, 320  # chart view box: drawn at the page's width
ML, MR, MT, MB = 90, 20, 20, 50  # margins: left (tick labels clear of the axis title), ...
DAY_SLOT_MAX = 64  # a day's bar is at most 0.8 of this wide, however few days there are

CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;
background:#fafafa}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.sub{color:#666;margin-bottom:16px}
.cards{display:flex;gap:12px;flex-wrap:wrap}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px 16px;min-width:130px}
.card b{display:block;font-size:20px}
svg{background:#fff;border:1px solid #ddd;border-radius:6px;width:100%;height:auto}
svg text{font-size:12px;fill:#444}svg text.at{font-size:13px;fill:#222;font-weight:600}
.grid{stroke:#e5e5e5}.axis{stroke:#999}
.legend{display:flex;flex-wrap:wrap;gap:12px;margin:6px 0}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
table{border-collapse:collapse;background:#fff;font-size:12px}
th,td{border:1px solid #ddd;padding:3px 5px;text-align:right}
th{background:#f0f0f0;white-space:normal;vertical-align:bottom}
td.k,th.k{text-align:left}td{white-space:nowrap}tr.total td{font-weight:bold;background:#f6f6f6}
td.k{max-width:220px;overflow:hidden;text-overflow:ellipsis}
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


def svg(chart_id: str, title: str, body: list[str], height: int = H) -> str:
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


def empty(chart_id: str, title: str) -> str:
    msg = f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle">no data</text>'
    return svg(chart_id, title, [msg])
