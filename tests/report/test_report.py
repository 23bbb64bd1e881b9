"""The `report` command: totals equal sums over the log; table, CSV, JSON and HTML outputs."""

from __future__ import annotations

import argparse
import csv
import io
import math
import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.policy.model import ThresholdPolicy
from proxy.report import totals as report
from proxy.report.totals import aggregate, parse_since, percentile, report_main
from proxy.tokens.prices import Prices, request_cost, trim_savings
from proxy.types import Level
from proxy.usage.ledger import UsageRecord, level_for

TEAMS = ("research", "support", "default")
MODELS = ("gpt-4o-mini", "gpt-4o", "my-llama", '<script>alert("x")</script>')
PRICES = {
    "gpt-4o": Prices(2.5e-06, 1.25e-06, 1e-05),
    "gpt-4o-mini": Prices(1.5e-07, 7.5e-08, 6e-07),
}


def make_log(path: Path, n: int, seed: int = 7, garbage: bool = True) -> list[dict[str, Any]]:
    """A log of `n` random records over 10 days, with some malformed lines mixed in."""
    rnd = random.Random(seed)
    start = datetime(2026, 10, 28, tzinfo=UTC)
    recs = []
    day_used: dict[tuple[str, str], int] = defaultdict(int)  # quota: tokens per team per day
    with path.open("wb") as f:
        for i in range(n):
            when = start + timedelta(seconds=i * 864_000 / max(n, 1))
            before, budget = rnd.randint(100, 12_000), 8000
            after = min(before, budget)
            util = before / budget if rnd.random() > 0.05 else None
            level = (
                Level.NORMAL
                if util is None or util < 0.8
                else Level.WARNING
                if util < 0.9
                else Level.CRITICAL
            )
            completion = rnd.randint(0, 900)
            team, status = rnd.choice(TEAMS), rnd.choice((200,) * 8 + (429, 502))
            day_used[team, when.date().isoformat()] += after + completion
            used = day_used[team, when.date().isoformat()]
            rec = UsageRecord(
                ts=when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                request_id=f"r{i}",
                team=team,
                model=rnd.choice(MODELS),
                status=status,
                quota_used=used,
                quota_limit=None if team == "default" else 1_200_000,
                quota_level=level_for(used / 1_200_000, ThresholdPolicy()),
                error={429: "quota_exceeded", 502: "upstream_error" if i % 2 else None}.get(status),
                budget=budget,
                tokens_before=before,
                tokens_after=after,
                dropped=int(before > after),
                deduped=int(rnd.random() < 0.03),
                prompt_tokens=after,
                completion_tokens=completion,
                total_tokens=after + completion,
                utilization=util,
                level=level,
                latency_ms=round(rnd.uniform(1, 5000), 3),
                kind="summary" if rnd.random() < 0.05 else "chat",
            )
            # Cache and cost figures, derived without drawing from `rnd` (so the other
            # fields are the same as before they were added).
            if status != 429:  # reached the upstream (a 502 is the upstream's failure)
                rec.upstream_ms = round(rec.latency_ms * 0.9, 3)
            if i % 53 == 7:  # refused for length: never sent, nothing trimmed or saved
                rec.status, rec.error, rec.upstream_ms = 400, "context_length_exceeded", None
                rec.tokens_after = rec.prompt_tokens = rec.completion_tokens = 0
                rec.total_tokens, rec.level = 0, Level.CRITICAL
            price = PRICES.get(rec.model)
            rec.cached_tokens = (after // 256) * 128 if status == 200 and i % 3 else None
            if price is not None:
                rec.cost_usd = request_cost(price, after, rec.cached_tokens, completion)
                rec.saved_usd = trim_savings(price, before, after, after, rec.cached_tokens)
                if rec.upstream_ms is None:  # never sent: it cost and saved nothing
                    rec.cost_usd = rec.saved_usd = 0.0
            f.write(rec.to_json_line())
            recs.append(orjson.loads(rec.to_json_line()))
            if garbage and i % 97 == 0:
                f.write(b"{not json\n\n[]\n")
        if garbage:
            f.write(b'{"ts": "2026-11-0')  # a torn last line
    return recs


def brute(recs: list[dict[str, Any]], by: list[str]) -> dict[tuple[str, ...], dict[str, Any]]:
    out: dict[tuple[str, ...], dict[str, Any]] = defaultdict(
        lambda: defaultdict(int) | {"lat": []}  # type: ignore[operator]
    )
    for r in recs:
        key = tuple(
            r["ts"][:10] if k == "day" else r["ts"][:7] if k == "month" else str(r[k]) for k in by
        )
        g = out[key]
        g["requests"] += 1
        g["errors"] += r["status"] >= 400 or r["error"] is not None
        for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
            g[k] += r[k]
        removed = r["tokens_before"] - r["tokens_after"]
        trimmed = removed > 0 or r["dropped"] or r["truncated"] or r["deduped"] or r["summarized"]
        sent = r["upstream_ms"] is not None or r["status"] < 400
        g["trimmed"] += bool(trimmed) and sent
        g["tokens_removed"] += max(removed, 0) if sent else 0
        refused = not sent and r["error"] == "context_length_exceeded"
        g["refused"] += refused
        g["refused_tokens"] += r["tokens_before"] if refused else 0
        g["saved_usd"] += (r["saved_usd"] or 0.0) if sent and r["cost_usd"] is not None else 0.0
        g["warnings"] += r["level"] == "warning"
        g["critical"] += r["level"] == "critical"
        g["lat"].append(r["latency_ms"])
    return out


@pytest.mark.parametrize("by", [["team"], ["team", "model"], ["day"], ["model", "day", "kind"]])
def test_totals_equal_sums_over_the_log(tmp_path: Path, by: list[str]) -> None:
    path = tmp_path / "u.jsonl"
    recs = make_log(path, 3000)
    with path.open("rb") as f:
        agg = aggregate(f, by)
    assert agg.lines == 3000
    assert agg.skipped == 3 * 31 + 1  # garbage and empty-array lines and the torn one
    expected = brute(recs, by)
    rows = agg.rows()
    assert [tuple(r[k] for k in by) for r in rows] == sorted(expected)
    for row in rows:
        e = expected[tuple(row[k] for k in by)]
        for k in ("requests", "errors", "prompt_tokens", "completion_tokens", "total_tokens",
                  "trimmed", "tokens_removed", "refused", "refused_tokens", "warnings",
                  "critical"):  # fmt: skip
            assert row[k] == e[k], k
        assert (row["saved_usd"] or 0.0) == pytest.approx(e["saved_usd"], abs=1e-5)
        lat = sorted(e["lat"])
        assert row["p50_ms"] == round(lat[math.ceil(0.5 * len(lat)) - 1], 3)
        assert row["p95_ms"] == round(lat[math.ceil(0.95 * len(lat)) - 1], 3)
        assert row["trimmed_share"] == round(e["trimmed"] / e["requests"], 4)
    total = agg.total()
    assert total["requests"] == 3000
    assert total["total_tokens"] == sum(r["total_tokens"] for r in recs)
    assert total["p95_ms"] == percentile(sorted(r["latency_ms"] for r in recs), 0.95)
    assert sum(sum(t.values()) for t in agg.day_team_tokens.values()) == total["total_tokens"]
    assert sum(agg.model_tokens.values()) == total["total_tokens"]
    assert sum(agg.util_hist) == sum(1 for r in recs if r["utilization"] is not None)


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([5.0], 0.95) == 5.0
    data = [float(i) for i in range(1, 101)]
    assert percentile(data, 0.5) == 50.0
    assert percentile(data, 0.95) == 95.0
    assert percentile([1.0, 2.0], 0.5) == 1.0


def test_since_and_until_filter_by_utc_time(tmp_path: Path) -> None:
    path = tmp_path / "u.jsonl"
    recs = make_log(path, 1000, garbage=False)
    since, until = parse_since("2026-11-01"), parse_since("2026-11-03T12:00:00Z")
    with path.open("rb") as f:
        agg = aggregate(f, ["day"], since, until)
    inside = [r for r in recs if "2026-11-01T00:00:00" <= r["ts"] < "2026-11-03T12:00:00"]
    assert agg.lines == len(inside) > 0
    assert [r["day"] for r in agg.rows()] == ["2026-11-01", "2026-11-02", "2026-11-03"]


def test_parse_since_forms() -> None:
    now = datetime(2026, 11, 10, 12, 30, tzinfo=UTC)
    assert parse_since("7d", now) == "2026-11-03T12:30:00"
    assert parse_since("12h", now) == "2026-11-10T00:30:00"
    assert parse_since("2w", now) == "2026-10-27T12:30:00"
    assert parse_since("2026-11-01") == "2026-11-01T00:00:00"
    assert parse_since("2026-11-01T02:00:00+02:00") == "2026-11-01T00:00:00"
    with pytest.raises(argparse.ArgumentTypeError):
        parse_since("last tuesday")


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="context-proxy report")
    report.add_report_arguments(parser)
    code = report.run(parser.parse_args(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_table_is_aligned_with_a_total_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "u.jsonl"
    make_log(path, 500)
    code, out, err = run_cli([str(path), "--by", "team,model"], capsys)
    assert code == 0 and "skipped 19 malformed lines" in err
    lines = out.splitlines()
    assert lines[0].split() == ["team", "model", "requests", "errors", "prompt_tokens",
                                "completion_tokens", "total_tokens", "trimmed_share",
                                "tokens_removed", "refused", "refused_tokens", "warnings",
                                "critical", "p50_ms", "p95_ms",
                                "cached_share", "cost_usd", "saved_usd"]  # fmt: skip
    assert len({len(line) for line in lines}) == 1  # the last column is right-aligned
    assert lines[-1].startswith("TOTAL ") and set(lines[1]) == {"-", " "}
    # Every number column ends at the same place on every line.
    ends = [i for i, c in enumerate(lines[1]) if c == "-" and lines[1][i + 1 : i + 2] != "-"]
    for line in lines[2:-2]:
        assert all(line[e] != " " for e in ends[2:])
    assert f"{500:,}" in lines[-1]


def test_csv_has_one_row_per_group_and_no_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "u.jsonl"
    recs = make_log(path, 800)
    code, out, _ = run_cli([str(path), "--by", "team", "--format", "csv"], capsys)
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert sorted(r["team"] for r in rows) == sorted(TEAMS)
    assert sum(int(r["total_tokens"]) for r in rows) == sum(r["total_tokens"] for r in recs)
    assert sum(int(r["requests"]) for r in rows) == 800


def test_json_output_to_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, out_file = tmp_path / "u.jsonl", tmp_path / "r.json"
    recs = make_log(path, 600)
    code, out, _ = run_cli(
        [str(path), "--by", "model,day", "--format", "json", "-o", str(out_file)], capsys
    )
    assert code == 0 and out == ""
    doc = orjson.loads(out_file.read_bytes())
    assert doc["by"] == ["model", "day"] and doc["skipped_lines"] == 3 * 7 + 1
    assert doc["total"]["requests"] == 600
    assert sum(g["prompt_tokens"] for g in doc["groups"]) == sum(r["prompt_tokens"] for r in recs)
    assert doc["total"]["warnings"] == sum(g["warnings"] for g in doc["groups"])


def test_rate_limited_requests_are_counted_per_team(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "u.jsonl"
    recs = make_log(path, 300, garbage=False)
    for n, r in enumerate(recs[:40]):
        r.update(status=429, error="rate_limit_exceeded", team="a" if n % 4 else "b")
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    code, out, _ = run_cli([str(path), "--by", "team", "--format", "json"], capsys)
    doc = orjson.loads(out)
    assert code == 0 and doc["total"]["rate_limited"] == 40
    by_team = {g["team"]: g["rate_limited"] for g in doc["groups"]}
    assert by_team["a"] == 30 and by_team["b"] == 10


def test_unknown_group_key_is_a_usage_error(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    report.add_report_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args([str(tmp_path / "u.jsonl"), "--by", "team,colour"])


def test_a_missing_log_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report_main(str(tmp_path / "nope.jsonl")) == 1
    assert "cannot read" in capsys.readouterr().err


def test_an_empty_log_gives_an_empty_table_and_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, page = tmp_path / "u.jsonl", tmp_path / "r.html"
    path.write_bytes(b"")
    code, out, _ = run_cli([str(path), "--html", str(page)], capsys)
    assert code == 0 and out.splitlines()[-1].startswith("TOTAL")
    assert page.read_text().count("no data") == 3


def test_html_is_self_contained_and_escapes_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, page = tmp_path / "u.jsonl", tmp_path / "r.html"
    make_log(path, 2000)
    code, _, err = run_cli([str(path), "--by", "team,model", "--html", str(page)], capsys)
    assert code == 0 and "wrote" in err
    html = page.read_text()
    for chart in ("chart-tokens-per-day", "chart-utilization", "chart-top-models"):
        assert f'id="{chart}"' in html
    assert "<script" not in html  # the hostile model name is text, not markup
    assert "&lt;script&gt;" in html
    for needle in ("src=", "href=", "@import", "url(", "https://"):
        assert needle not in html
    assert html.count('class="bar"') > 40


GOOD = {"ts": "2026-11-20T10:00:00.000Z", "team": "a", "model": "m", "status": 200,
        "prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15, "level": "normal",
        "cost_usd": 0.001, "saved_usd": 0.0, "latency_ms": 12.0, "utilization": 0.5}  # fmt: skip
HOSTILE = [
    b'{"ts": ["2026-11-20"], "team": "a", "total_tokens": 1}',
    b'{"ts": {"d": 1}, "team": "a", "total_tokens": 1}',
    b'{"ts": "2026-11-20T10:00:00Z", "level": ["warning"], "total_tokens": 1}',
    b'{"ts": "2026-11-20T10:00:00Z", "level": {"x": 1}, "total_tokens": 1}',
    b'{"ts": "2026-11-20T10:00:00Z", "total_tokens": 18446744073709551615}',
    b'{"ts": "2026-11-20T10:00:00Z", "prompt_tokens": -5}',
    b'{"ts": "2026-11-20T10:00:00Z", "utilization": 1e308}',
    b'{"ts": "2026-11-20T10:00:00Z", "utilization": -1e308}',
    b'{"ts": "2026-11-20T10:00:00Z", "cost_usd": "NaN"}',
    b'{"ts": "2026-11-20T10:00:00Z", "cost_usd": "inf"}',
    b'{"ts": "2026-11-20T10:00:00Z", "cost_usd": 1e999}',
]


@pytest.mark.parametrize("output", ["table", "json", "csv", "html"])
def test_bad_lines_are_skipped_and_counted_in_every_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    """Each line here aborted `context-proxy report` (or its HTML) before."""
    path = tmp_path / "u.jsonl"
    path.write_bytes(b"\n".join([orjson.dumps(GOOD), *HOSTILE, orjson.dumps(GOOD)]) + b"\n")
    argv = [str(path)]
    if output == "html":
        argv += ["--html", str(tmp_path / "d.html")]
    elif output != "table":
        argv += ["--format", output]
    code, out, err = run_cli(argv, capsys)
    assert code == 0
    assert f"skipped {len(HOSTILE)} malformed lines" in err
    if output == "json":
        doc = orjson.loads(out)
        assert doc["skipped_lines"] == len(HOSTILE) and doc["total"]["total_tokens"] == 30
    if output == "html":
        page = (tmp_path / "d.html").read_text()
        assert "NaN" not in page and "Infinity" not in page


def test_several_logs_globs_and_gzip_rotated_ones_are_read_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fleet writes one log per replica and rotates them: `report` takes paths and
    globs, reads .gz files, and totals them all."""
    import gzip

    logs = tmp_path / "logs"
    logs.mkdir()
    line = orjson.dumps(GOOD) + b"\n"
    (logs / "replica-a.jsonl").write_bytes(line * 3)
    (logs / "replica-b.jsonl").write_bytes(line * 2)
    with gzip.open(logs / "replica-a.jsonl.1.gz", "wb") as f:
        f.write(line * 4)
    extra = tmp_path / "other.jsonl"
    extra.write_bytes(line)
    code, out, err = run_cli([str(logs / "*.jsonl*"), str(extra), "--format", "json"], capsys)
    assert code == 0, err
    assert orjson.loads(out)["total"]["requests"] == 10
    code, _, err = run_cli([str(tmp_path / "nothing-*.jsonl")], capsys)
    assert code == 1 and "no file matches" in err
