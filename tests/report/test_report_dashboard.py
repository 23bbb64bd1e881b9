"""Dashboard panels: quota used vs limit, errors by kind, axis titles, utilization overflow."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.report.tally import MAX_KINDS, Tally
from proxy.report.totals import aggregate, report_main
from tests.report.test_report import make_log


def render(tmp_path: Path, recs: list[dict[str, Any]] | None = None, n: int = 3000) -> str:
    log, page = tmp_path / "u.jsonl", tmp_path / "r.html"
    if recs is None:
        make_log(log, n)
    else:
        log.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    assert report_main(str(log), ["team"], html=str(page), out=str(tmp_path / "t.txt")) == 0
    return page.read_text()


def test_every_chart_has_axis_titles(tmp_path: Path) -> None:
    html = render(tmp_path)
    charts = re.findall(r"<svg id=\"(chart-[a-z-]+)\".*?</svg>", html)
    assert set(charts) == {
        "chart-tokens-per-day",
        "chart-utilization",
        "chart-top-models",
        "chart-quota",
        "chart-errors",
        "chart-cache",
        "chart-cost",
        "chart-saved",
    }
    for svg in re.findall(r"<svg id=\"chart-.*?</svg>", html):
        assert svg.count('class="at"') == 2, svg[:80]  # an x and a rotated y title


def test_errors_by_kind_per_team_match_the_log(tmp_path: Path) -> None:
    recs = make_log(tmp_path / "u.jsonl", 3000, garbage=False)
    with (tmp_path / "u.jsonl").open("rb") as f:
        agg = aggregate(f, ["team"])
    expected: Counter[tuple[str, str]] = Counter()
    for r in recs:
        if r["error"] is not None:
            expected[r["team"], r["error"]] += 1
        elif r["status"] >= 400:
            expected[r["team"], f"http_{r['status']}"] += 1
    got = Counter({(t, k): n for t, kinds in agg.tally.errors.items() for k, n in kinds.items()})
    assert got == expected and {k for _, k in got} == {
        "quota_exceeded",
        "upstream_error",
        "http_502",
        "context_length_exceeded",
    }
    assert sum(got.values()) == agg.total()["errors"]
    html = render(tmp_path)
    table = html[html.index('<table id="errors">') :]
    table = table[: table.index("</table>")]
    assert "quota_exceeded" in table and "http_502" in table


def quota_rec(
    ts: str,
    team: str,
    used: int,
    limit: int | None,
    level: str = "normal",
    period: str | None = "day",
) -> dict[str, Any]:
    return {"ts": ts, "team": team, "model": "m", "status": 200, "total_tokens": 1,
            "quota_used": used, "quota_limit": limit, "quota_level": level,
            "quota_period": period}  # fmt: skip


def test_quota_panel_shows_the_newest_peak_of_each_configured_period(tmp_path: Path) -> None:
    rec = quota_rec
    recs = [
        rec("2026-10-30T10:00:00Z", "research", 950, 1000, "critical"),
        rec("2026-11-01T10:00:00Z", "research", 100, 1000),
        rec("2026-11-02T09:00:00Z", "research", 300, 1000),
        rec("2026-11-02T10:00:00Z", "research", 850, 1000, "warning"),
        rec("2026-11-02T11:00:00Z", "research", 200, 1000),  # a later, lower reading
        rec("2026-11-02T11:00:00Z", "open", 0, None),  # no limit: not in the panel
        rec("2026-11-01T11:00:00Z", "ops", 40_000, 50_000, "normal", "month"),
        rec("2026-11-02T11:00:00Z", "ops", 45_000, 50_000, "warning", "month"),
    ]
    rows = aggregate((orjson.dumps(r) for r in recs), ["team"]).tally.quota_rows()
    assert [
        (r["team"], r["period"], r["when"], r["used"], r["limit"], r["level"]) for r in rows
    ] == [
        ("ops", "month", "2026-11", 45_000, 50_000, "warning"),
        ("research", "day", "2026-11-02", 850, 1000, "warning"),
    ]
    html = render(tmp_path, recs)
    table = html[html.index('<table id="quota">') :]
    table = table[: table.index("</table>")]
    assert "2026-11-02" in table and "85.0%" in table and "open" not in table


def test_a_daily_quota_never_shows_as_a_monthly_one(tmp_path: Path) -> None:
    """A team with `monthly_tokens: null` showed a red "month 103%" row, its limit the
    daily one, folded from daily peaks."""
    recs = [
        quota_rec(f"2026-11-{d:02d}T10:00:00Z", "t", 59_000, 60_000, "critical") for d in (1, 2, 3)
    ]
    recs += [quota_rec("2026-11-04T10:00:00Z", "legacy", 10, 100, "normal", None)]  # older rows
    rows = aggregate((orjson.dumps(r) for r in recs), ["team"]).tally.quota_rows()
    assert [(r["team"], r["period"], r["when"]) for r in rows] == [
        ("legacy", "quota", "2026-11-04"),
        ("t", "day", "2026-11-03"),
    ]


def test_the_quota_panel_shows_spend_against_dollar_quotas(tmp_path: Path) -> None:
    def spend(
        ts: str, team: str, used: float, limit: float, level: str, period: str
    ) -> dict[str, Any]:
        return {"ts": ts, "team": team, "model": "m", "status": 200, "total_tokens": 1,
                "cost_usd": 0.01, "spend_usd": used, "spend_limit_usd": limit,
                "spend_level": level, "spend_period": period}  # fmt: skip

    recs = [
        spend("2026-11-02T09:00:00Z", "ops", 41.5, 50.0, "warning", "day"),
        spend("2026-11-02T10:00:00Z", "ops", 46.25, 50.0, "critical", "day"),
        spend("2026-11-02T11:00:00Z", "lab", 120.0, 1000.0, "normal", "month"),
        {**quota_rec("2026-11-02T11:00:00Z", "lab", 800, 1000, "warning")},
    ]
    rows = aggregate((orjson.dumps(r) for r in recs), ["team"]).tally.quota_rows()
    assert [
        (r["team"], r["unit"], r["period"], r["when"], r["used"], r["limit"], r["level"])
        for r in rows
    ] == [
        ("lab", "tokens", "day", "2026-11-02", 800, 1000, "warning"),
        ("lab", "usd", "month", "2026-11", 120.0, 1000.0, "normal"),
        ("ops", "usd", "day", "2026-11-02", 46.25, 50.0, "critical"),
    ]
    html = render(tmp_path, recs)
    table = html[html.index('<table id="quota">') :]
    table = table[: table.index("</table>")]
    assert "$46.25" in table and "$50.00" in table and "92.5%" in table
    assert "day $" in table and "month $" in table and "$1,000" in table
    assert "800 tokens" in table
    chart = html[html.index('id="chart-quota"') :]
    assert "ops · day $" in chart[: chart.index("</svg>")]


def test_utilization_overflow_is_labelled_with_its_count_and_max(tmp_path: Path) -> None:
    utils = [0.2, 0.5, 0.85, 1.49, 1.5, 2.0, 3.7]
    recs = [
        {"ts": "2026-11-01T10:00:00Z", "team": "t", "model": "m", "status": 200, "utilization": u}
        for u in utils
    ]
    html = render(tmp_path, recs)
    assert re.search(r'id="util-overflow"[^>]*>3 at ≥ 1.5 \(max 3.70\)<', html)
    assert ">≥1.5<" in html
    assert "<title>≥ 1.50: 3 requests</title>" in html


def test_empty_log_panels_say_so(tmp_path: Path) -> None:
    (tmp_path / "u.jsonl").write_bytes(b"")
    html = render(tmp_path, [])
    assert "no quota limits recorded" in html and "no errors recorded" in html
    assert 'id="quota"' not in html and 'id="errors"' not in html


def test_error_kinds_per_team_are_capped() -> None:
    tally = Tally()
    for i in range(MAX_KINDS * 5):
        tally.add_error("t", f"kind{i}")
    assert len(tally.errors["t"]) == MAX_KINDS + 1
    assert tally.errors["t"]["other"] == MAX_KINDS * 4


def test_top_models_leave_out_failed_requests_and_nameless_rows() -> None:
    recs = [
        {"ts": "2026-11-02T10:00:00Z", "team": "t", "model": "gpt-4o", "status": 200, "total_tokens": 50},
        {"ts": "2026-11-02T10:00:00Z", "team": "t", "model": "", "status": 401, "total_tokens": 0},
        {"ts": "2026-11-02T10:00:00Z", "team": "t", "model": "broken-test-model", "status": 502,
         "total_tokens": 0, "error": "upstream_unreachable"},
    ]  # fmt: skip
    agg = aggregate((orjson.dumps(r) for r in recs), ["team"])
    assert agg.model_tokens == {"gpt-4o": 50, "(failed requests)": 0}  # apart, and no "" model


def test_one_day_of_data_is_a_bar_not_a_wall() -> None:
    from proxy.report.day_charts import DAY_SLOT_MAX, tokens_per_day

    svg, _ = tokens_per_day({"2026-11-02": {"a": 500, "b": 300}})
    widths = [float(w) for w in re.findall(r'class="bar" x="[^"]+" y="[^"]+" width="([^"]+)"', svg)]
    assert widths and max(widths) <= DAY_SLOT_MAX * 0.8 + 0.1


def test_savings_below_zero_are_drawn_below_the_zero_line() -> None:
    """A day on which trimming cost more than it saved (cache writes a cut caused) shows
    as a bar under the axis, not as nothing."""
    from proxy.report.day_charts import stacked_per_day
    from proxy.report.panels import dollars

    svg, teams = stacked_per_day(
        "chart-saved", "saved", {"2026-11-02": {"a": 0.5, "b": -0.25}, "2026-11-03": {"a": 0.1}},
        "USD", dollars, dollars,
    )  # fmt: skip
    axis = float(re.search(r'class="axis"[^>]*y1="([\d.]+)"', svg).group(1))  # type: ignore[union-attr]
    bars = {
        team: (float(y), float(h))
        for y, h, team in re.findall(
            r'class="bar" x="[^"]+" y="([\d.]+)" width="[^"]+" height="([\d.]+)"[^>]*'
            r'data-team="(\w)"><title>2026-11-02',
            svg,
        )
    }
    assert teams == ["a", "b"]
    assert bars["a"][0] + bars["a"][1] == pytest.approx(axis, abs=0.2)  # up from the line
    assert bars["b"][0] == pytest.approx(axis, abs=0.2)  # down from it
    assert "-$0.25" in svg


def test_failed_requests_are_apart_from_the_top_models() -> None:
    from proxy.report.usage_charts import top_models

    svg = top_models({"gpt-4o": 900, "gpt-4o-mini": 50, "(failed requests)": 2000})
    names = re.findall(r'text-anchor="end">([^<]+)</text><rect', svg)
    assert names == ["gpt-4o", "gpt-4o-mini", "(failed requests)"]  # last, after a gap
    assert 'fill="#9d9d9d"><title>(failed requests)' in svg
