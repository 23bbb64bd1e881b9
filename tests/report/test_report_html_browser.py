"""The dashboard page opens in headless Chromium without errors and shows its charts."""

from __future__ import annotations

import re
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.report.totals import report_main
from tests.browser import obtain_chromium
from tests.report.test_report import make_log

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--window-size=1280,1600",
]


@pytest.fixture(scope="session")
def chromium() -> str:
    """The browser, installed with apt on first use when missing; never a skip."""
    return obtain_chromium()


def run_chromium(chromium: str, args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def png_pixels(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """(width, height, bytes per pixel, rows) of an 8-bit RGB/RGBA PNG: zlib + unfiltering."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    height = bpp = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        ftype, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        if ftype == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif ftype == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev, strict=True))
        elif ftype == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif ftype == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def test_dashboard_renders_in_headless_chromium(tmp_path: Path, chromium: str) -> None:
    log, page = tmp_path / "usage.jsonl", tmp_path / "report.html"
    make_log(log, 5000)
    assert (
        report_main(str(log), ["team", "model"], html=str(page), out=str(tmp_path / "t.txt")) == 0
    )
    url = page.resolve().as_uri()

    shot = tmp_path / "shot.png"
    done = run_chromium(
        chromium, ["--enable-logging=stderr", "--v=0", f"--screenshot={shot}", url], tmp_path / "p1"
    )
    assert shot.exists(), done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console  # no script errors (the page has no script at all)

    width, height, bpp, rows = png_pixels(shot.read_bytes())
    assert (width, height) == (1280, 1600)
    colours = set()
    for row in rows[::8]:
        for x in range(0, width * bpp, bpp * 4):
            colours.add(row[x : x + 3])
    # White page, grey text and gridlines, and the three teams' colours.
    assert len(colours) > 20, len(colours)
    palette = {bytes.fromhex(c) for c in ("4e79a7", "f28e2b", "59a14f")}
    assert palette <= colours, palette - colours

    dom = run_chromium(chromium, ["--dump-dom", url], tmp_path / "p2")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    charts = ("chart-tokens-per-day", "chart-utilization", "chart-top-models")
    panels = ("chart-quota", "chart-errors", "chart-cache", "chart-cost", "chart-saved")
    for chart in (*charts, *panels):
        assert f'id="{chart}"' in html
    assert html.count('class="at"') == 16  # an x and a y axis title on each of the 8 charts
    assert 'id="cache"' in html and 'id="cost"' in html and html.count('class="pt"') > 10
    assert 'id="util-overflow"' in html and "≥1.5" in html
    assert 'id="quota"' in html and 'id="errors"' in html
    assert "quota_exceeded" in html and "http_502" in html
    assert html.count('class="bar"') > 40
    assert 'id="totals"' in html and "TOTAL" in html
    assert "<script" not in html


def test_the_console_check_catches_a_script_error(tmp_path: Path, chromium: str) -> None:
    """Keeps the check above honest: Chromium's log format is what we grep for."""
    page = tmp_path / "bad.html"
    page.write_text("<html><body><p>x</p><script>noSuchFunction();</script></body></html>")
    done = run_chromium(
        chromium,
        ["--enable-logging=stderr", "--v=0", f"--screenshot={tmp_path / 's.png'}", page.as_uri()],
        tmp_path / "p",
    )
    assert any("CONSOLE" in line and "Uncaught" in line for line in done.stderr.splitlines())


# Appended to a copy of the page (the page itself has no script): after layout, every
# table or chart wider than the window, or cut off by it, is named in a data attribute.
MEASURE = """<script>
addEventListener('load', () => {
  const wide = [];
  const room = document.documentElement.clientWidth;
  for (const el of document.querySelectorAll('table, svg')) {
    const box = el.getBoundingClientRect();
    if (box.right > room + 1 || el.scrollWidth > el.clientWidth + 1) wide.push(el.id || el.tagName);
  }
  if (document.documentElement.scrollWidth > room + 1) wide.push('page');
  document.body.setAttribute('data-cut', wide.join(','));
});
</script>"""


def cut_off(chromium: str, page: Path, tmp: Path) -> list[str]:
    measured = tmp / "measured.html"
    measured.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = subprocess.run(
        [chromium, *CHROMIUM_FLAGS[:-1], "--window-size=1400,1000", "--virtual-time-budget=3000",
         f"--user-data-dir={tmp / 'profile'}", "--dump-dom", measured.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    found = re.search(r'data-cut="([^"]*)"', dom.stdout)
    assert found is not None, dom.stderr[-2000:]
    return [name for name in found.group(1).split(",") if name]


def with_quotas(record: dict[str, Any], quotas: str) -> dict[str, Any]:
    """The row as a team with token quotas (as made), none, or dollar quotas would log it."""
    if quotas == "tokens":
        return record
    bare = {**record, "quota_limit": None, "quota_used": 0, "quota_level": "normal"}
    if quotas == "none" or record["team"] == "default":
        return bare
    limit = 40.0 if record["team"] == "research" else 900.0  # a day's and a month's
    used = limit * (record["quota_used"] % 1_200_000) / 1_200_000
    level = "critical" if used >= 0.9 * limit else "warning" if used >= 0.8 * limit else "normal"
    return {**bare, "spend_usd": round(used, 6), "spend_limit_usd": limit, "spend_level": level,
            "spend_period": "day" if record["team"] == "research" else "month"}  # fmt: skip


@pytest.mark.parametrize(
    ("days", "quotas"), [(1, "tokens"), (30, "tokens"), (30, "none"), (1, "usd"), (30, "usd")]
)
def test_nothing_is_cut_off_at_1400_px(
    tmp_path: Path, chromium: str, days: int, quotas: str
) -> None:
    """The team lead's window: every table and chart fits, one day of data or thirty,
    with token quotas, dollar quotas or none."""
    log, page = tmp_path / "usage.jsonl", tmp_path / "report.html"
    records = [with_quotas(r, quotas) for r in make_log(log, 3000, garbage=False)]
    first = records[0]["ts"][:10]
    if days == 1:  # the same rows, all on one day
        log.write_bytes(b"".join(
            orjson.dumps({**r, "ts": first + r["ts"][10:]}) + b"\n" for r in records))  # fmt: skip
    else:
        log.write_bytes(b"".join(
            orjson.dumps({**r, "ts": f"2026-11-{1 + i % 30:02d}" + r["ts"][10:]}) + b"\n"
            for i, r in enumerate(records)))  # fmt: skip
    assert (
        report_main(str(log), ["team", "model"], html=str(page), out=str(tmp_path / "t.txt")) == 0
    )
    assert cut_off(chromium, page, tmp_path) == []
    html = page.read_text()
    quota_section = html[html.index("<h2>Quota</h2>") : html.index("<h2>Errors by kind</h2>")]
    if quotas == "none":
        assert "no quota limits recorded" in quota_section and 'id="quota"' not in quota_section
    elif quotas == "usd":
        assert (
            "day $" in quota_section
            and "month $" in quota_section
            and " tokens" not in (quota_section[quota_section.index('<table id="quota">') :])
        )
    else:
        assert "day $" not in quota_section and " tokens" in quota_section


def test_each_team_has_one_colour_on_every_chart_and_its_own_thresholds(
    tmp_path: Path, chromium: str
) -> None:
    """As the browser lays the page out: every mark drawn for a team (bars of tokens, cost
    and savings, cache points, quota swatches) has the colour the team legend gives it,
    and the threshold marks are each team's own (research at 0.50/0.75 by its policy,
    the others at the defaults)."""
    log, page, folder = tmp_path / "usage.jsonl", tmp_path / "report.html", tmp_path / "pol"
    folder.mkdir()
    (folder / "research.yaml").write_text(
        "team: research\nthresholds: {warning: 0.5, critical: 0.75}\n"
    )
    make_log(log, 3000, garbage=False)
    assert report_main(str(log), ["team"], html=str(page), out=str(tmp_path / "t.txt"),
                       policies=str(folder)) == 0  # fmt: skip
    dom = run_chromium(chromium, ["--dump-dom", page.resolve().as_uri()], tmp_path / "p3")
    html = dom.stdout
    teams_legend = html[html.index("<h2>Teams</h2>") : html.index("<h2>Tokens per day")]
    legend = dict(
        (team, colour)
        for colour, team in re.findall(
            r"background:\s*(#[0-9a-f]{6})[^>]*></i>([^<]+)<", teams_legend
        )
    )
    assert set(legend) == {"research", "support", "default"}
    assert len(set(legend.values())) == 3
    marks = re.findall(r'<(?:rect|circle)[^>]*fill="(#[0-9a-f]{6})"[^>]*data-team="([^"]+)"', html)
    charts_seen = {team: set() for team in legend}
    for colour, team in marks:
        assert legend[team] == colour, (team, colour)
        charts_seen[team].add(colour)
    for chart in ("chart-tokens-per-day", "chart-cost", "chart-saved", "chart-cache"):
        section = html[html.index(f'id="{chart}"') :]
        section = section[: section.index("</svg>")]
        drawn = set(re.findall(r'data-team="([^"]+)"', section))
        assert drawn == set(legend), (chart, drawn)
    lines = re.findall(
        r'<line class="threshold"[^>]*data-teams?="([^"]*)" data-level="(\w+)" data-value="([\d.]+)"',
        html,
    )
    util = {(teams, level, value) for teams, level, value in lines if "," in teams or teams}
    assert ("research", "warning", "0.50") in util and ("research", "critical", "0.75") in util
    assert ("default,support", "warning", "0.80") in util
    quota = html[html.index('id="chart-quota"') :]
    quota = quota[: quota.index("</svg>")]
    marks_q = set(
        re.findall(r'data-team="([^"]+)" data-level="(\w+)" data-value="([\d.]+)"', quota)
    )
    assert ("research", "warning", "0.50") in marks_q and ("support", "critical", "0.90") in marks_q
    assert ("research", "warning", "0.80") not in marks_q
