"""Report: cached share, cost and savings columns (table, CSV, JSON) and the dashboard's
cache and cost panels, checked against sums over the log."""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.report.html import nice_max
from proxy.report.spend_panels import dollars
from proxy.report.totals import aggregate, report_main
from tests.report.test_report import make_log


def sums(recs: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"prompt": 0, "cached": 0, "cost": 0.0, "saved": 0.0, "priced": 0}
    )
    for r in recs:
        g = out[r["ts"][:10] + "|" + r["team"] if key == "day_team" else str(r[key])]
        g["prompt"] += r["prompt_tokens"]
        g["cached"] += r["cached_tokens"] or 0
        if r["cost_usd"] is not None:
            g["priced"] += 1
            g["cost"] += r["cost_usd"]
            g["saved"] += r["saved_usd"]
    return out


@pytest.mark.parametrize("by", ["team", "model"])
def test_cache_and_cost_columns_equal_sums_over_the_log(tmp_path: Path, by: str) -> None:
    path = tmp_path / "u.jsonl"
    recs = make_log(path, 2000)
    with path.open("rb") as f:
        agg = aggregate(f, [by])
    expected = sums(recs, by)
    rows = agg.rows()
    assert {r[by] for r in rows} == set(expected)
    for row in rows:
        e = expected[row[by]]
        assert row["cached_tokens"] == e["cached"]
        assert row["cached_share"] == round(e["cached"] / e["prompt"], 4)
        if e["priced"]:
            assert row["cost_usd"] == pytest.approx(e["cost"], abs=1e-6)
            assert row["saved_usd"] == pytest.approx(e["saved"], abs=1e-6)
        else:  # a model without a known price: unknown, not free
            assert row["cost_usd"] is None and row["saved_usd"] is None
    assert any(r["cost_usd"] is None for r in rows) or by == "team"
    total = agg.total()
    assert total["cached_tokens"] == sum(r["cached_tokens"] or 0 for r in recs)
    priced = [r for r in recs if r["cost_usd"] is not None]
    assert total["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in priced), abs=1e-6)


def test_csv_and_json_carry_the_new_columns(tmp_path: Path) -> None:
    path = tmp_path / "u.jsonl"
    make_log(path, 300)
    out = tmp_path / "out.csv"
    assert report_main(str(path), ["model"], fmt="csv", out=str(out)) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert {"cached_tokens", "cached_share", "cost_usd", "saved_usd"} <= set(rows[0])
    by_model = {r["model"]: r for r in rows}
    assert float(by_model["gpt-4o"]["cost_usd"]) > 0
    assert by_model["my-llama"]["cost_usd"] == ""  # null: no known price
    out_json = tmp_path / "out.json"
    assert report_main(str(path), ["team"], fmt="json", out=str(out_json)) == 0
    doc = orjson.loads(out_json.read_bytes())
    assert {"cached_share", "cost_usd", "saved_usd"} <= set(doc["total"])
    assert all(isinstance(g["cost_usd"], float) for g in doc["groups"])


def test_dashboard_cache_panel_shows_share_per_team_and_day(tmp_path: Path) -> None:
    path, page = tmp_path / "u.jsonl", tmp_path / "r.html"
    recs = make_log(path, 1500)
    assert report_main(str(path), ["team"], html=str(page), out=str(tmp_path / "t")) == 0
    html = page.read_text()
    svg = re.search(r'<svg id="chart-cache".*?</svg>', html)
    assert svg is not None
    points = dict(
        (f"{day}|{team}", float(share))
        for day, team, share in re.findall(
            r"<title>(\d{4}-\d\d-\d\d) (\w+): ([\d.]+)% of [\d,]+ prompt tokens", svg.group(0)
        )
    )
    expected = sums(recs, "day_team")
    assert set(points) == {k for k, v in expected.items() if v["prompt"] > 0}
    for key, share in points.items():
        e = expected[key]
        assert share == pytest.approx(100 * e["cached"] / e["prompt"], abs=0.05)
    assert 'id="cache"' in html


def test_dashboard_cost_panel_per_team_and_day(tmp_path: Path) -> None:
    path, page = tmp_path / "u.jsonl", tmp_path / "r.html"
    recs = make_log(path, 1500)
    assert report_main(str(path), ["team"], html=str(page), out=str(tmp_path / "t")) == 0
    html = page.read_text()
    expected = sums(recs, "day_team")
    for chart, field in (("chart-cost", "cost"), ("chart-saved", "saved")):
        svg = re.search(rf'<svg id="{chart}".*?</svg>', html)
        assert svg is not None
        bars = re.findall(r"<title>(\d{4}-\d\d-\d\d) (\w+): ([^<]+)</title></rect>", svg.group(0))
        assert bars
        for day, team, text in bars:
            assert text == dollars(expected[f"{day}|{team}"][field])
    table = re.search(r'<table id="cost">.*?</table>', html)
    assert table is not None and table.group(0).count("<tr>") == 4  # head + 3 teams


def test_a_log_without_cache_or_prices_says_so(tmp_path: Path) -> None:
    path, page = tmp_path / "u.jsonl", tmp_path / "r.html"
    recs = make_log(path, 200, garbage=False)
    with path.open("wb") as f:
        for r in recs:
            r.pop("cached_tokens"), r.pop("cost_usd"), r.pop("saved_usd")  # an older log
            f.write(orjson.dumps(r) + b"\n")
    assert report_main(str(path), ["team"], html=str(page), out=str(tmp_path / "t")) == 0
    html = page.read_text()
    assert "no cached tokens reported in this log" in html
    assert "no priced requests in this log" in html
    assert 'id="cost"' not in html and 'id="cache"' not in html
    table = (tmp_path / "t").read_text()
    assert table.splitlines()[-1].split()[-3:] == ["0.0%", "-", "-"]


def test_small_values_get_round_gridlines() -> None:
    assert nice_max(0.03) == pytest.approx(0.03)
    assert nice_max(0.0123) == pytest.approx(0.015)
    assert nice_max(0.5) == pytest.approx(0.5)
    assert nice_max(101) == 120.0  # unchanged above 1
    assert [dollars(v) for v in (1234.5, 12.345, 0.01234)] == ["$1,234", "$12.35", "$0.0123"]


def test_group_by_api(tmp_path: Path) -> None:
    path = tmp_path / "u.jsonl"
    recs = make_log(path, 300, garbage=False)
    with path.open("wb") as f:
        for i, r in enumerate(recs):
            if i % 3 == 0:
                r["api"] = "responses"
            elif i % 3 == 1:
                r.pop("api")  # an older log line
            f.write(orjson.dumps(r) + b"\n")
    with path.open("rb") as f:
        rows = aggregate(f, ["api"]).rows()
    assert {r["api"]: r["requests"] for r in rows} == {"chat": 200, "responses": 100}
