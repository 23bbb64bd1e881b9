"""Inclusion log: the line built from a plan report, its bounds, the id scan, the writer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from proxy.cli.main import _settings, build_parser, main
from proxy.planner import ItemReport, PlanReport
from proxy.server.core.settings import Settings
from proxy.usage import InclusionLog
from proxy.usage.inclusion import MAX_ID_CHARS, MAX_IDS, carries_ids, inclusion_line


def item(i: int, action: str, id: str | None, tokens: int = 10) -> ItemReport:
    after = 0 if action in ("drop", "summarize", "dedupe") else tokens
    return ItemReport(
        i, "message", "user", "memory", "high", "x_context", tokens, after, action, "", id
    )


def report(*items: ItemReport) -> PlanReport:
    return PlanReport(100, 125, 500, 90, "o200k_base", False, items=list(items))


def test_line_lists_each_id_with_tokens_and_named_action() -> None:
    rep = report(
        item(0, "keep", None),
        item(1, "drop", "a"),
        item(2, "truncate", "b"),
        item(3, "clear", "c"),
        item(4, "summarize", "d"),
        item(5, "dedupe", "e"),
        item(6, "keep", "f"),
        item(7, "summary-inserted", "g"),
    )
    line = inclusion_line(rep, "req-1", "research", "gpt-4o")
    assert line is not None and line.endswith(b"\n") and line.count(b"\n") == 1
    row = orjson.loads(line)
    assert {k: row[k] for k in ("request_id", "team", "model", "budget")} == {
        "request_id": "req-1",
        "team": "research",
        "model": "gpt-4o",
        "budget": 100,
    }
    assert (row["tokens_before"], row["tokens_after"], row["ids_omitted"]) == (500, 90, 0)
    actions = [(e["id"], e["action"]) for e in row["ids"]]
    assert actions == [
        ("a", "dropped"),
        ("b", "truncated"),
        ("c", "cleared"),
        ("d", "summarized"),
        ("e", "deduped"),
        ("f", "kept"),
        ("g", "kept"),
    ]
    assert row["ids"][0] == {"id": "a", "tokens": 10, "tokens_after": 0, "action": "dropped"}


def test_no_line_without_ids() -> None:
    assert inclusion_line(report(item(0, "keep", None)), "r", "t", "m") is None
    assert inclusion_line(report(), "r", "t", "m") is None


def test_line_is_bounded_in_ids_and_their_length() -> None:
    many = [item(i, "keep", f"id-{i}") for i in range(MAX_IDS + 44)]
    many.append(item(999, "keep", "x" * 10_000))
    row = orjson.loads(inclusion_line(report(*many), "r", "t", "m" * 5000) or b"")
    assert len(row["ids"]) == MAX_IDS
    assert row["ids_omitted"] == 45
    assert len(row["model"]) == 200
    long = orjson.loads(inclusion_line(report(item(0, "keep", "y" * 10_000)), "r", "t", "m") or b"")
    assert long["ids"][0]["id"] == "y" * MAX_ID_CHARS


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([{"role": "user", "content": "hi", "x_context": {"id": "a"}}], True),
        ([{"role": "user", "content": "hi", "x_context": {"section": "memory"}}], False),
        ([{"role": "user", "content": '<context section="memory" id="m">x</context>'}], True),
        ([{"role": "user", "content": '<context section="memory">x</context> id=3'}], True),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": '<context id="p">x</context>'}],
                }
            ],
            True,
        ),
        ([{"role": "user", "content": "id=3 but no tag"}], False),
        ([{"role": "user", "content": None}, "junk", {"role": "tool"}], False),
        ("not a list", False),
    ],
)
def test_carries_ids(messages: object, expected: bool) -> None:
    assert carries_ids(messages) is expected


def test_writer_appends_whole_lines_and_closes(tmp_path: Path) -> None:
    path = tmp_path / "inc.jsonl"

    async def run() -> InclusionLog:
        log = InclusionLog(str(path))
        await asyncio.gather(log.start(), log.start())  # concurrent first uses: one writer
        for i in range(3):
            log.write(f"r{i}", orjson.dumps({"request_id": f"r{i}"}) + b"\n")
        await log.aclose()
        return log

    log = asyncio.run(run())
    assert [orjson.loads(x)["request_id"] for x in path.read_bytes().splitlines()] == [
        "r0",
        "r1",
        "r2",
    ]
    assert (log.written, log.dropped) == (3, 0)


def test_a_log_never_started_creates_no_file(tmp_path: Path) -> None:
    path = tmp_path / "inc.jsonl"
    asyncio.run(InclusionLog(str(path)).aclose())
    assert not path.exists()


def test_setting_from_flag_and_environment() -> None:
    assert Settings().inclusion_log is None
    assert Settings.from_env({}).inclusion_log is None
    env = Settings(inclusion_log="/tmp/x.jsonl").to_env()
    assert env["CONTEXT_PROXY_INCLUSION_LOG"] == "/tmp/x.jsonl"
    assert Settings.from_env(env).inclusion_log == "/tmp/x.jsonl"
    assert "CONTEXT_PROXY_INCLUSION_LOG" not in Settings().to_env()
    args = build_parser().parse_args(["serve", "--inclusion-log", "inc.jsonl"])
    assert _settings(args).inclusion_log == "inc.jsonl"


def test_serve_refuses_an_unwritable_inclusion_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "missing-folder" / "inc.jsonl"
    folder = tmp_path / "policies"
    folder.mkdir()
    code = main(["serve", "--policies", str(folder), "--inclusion-log", str(target)])
    assert code == 1
    assert "--inclusion-log" in capsys.readouterr().err
