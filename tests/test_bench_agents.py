"""The agent-run benchmark's measures (tests/bench/bench_agents.py) on small made-up runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))

import bench_agents as b

from proxy.policy.model import Policy
from proxy.tokens import TokenCounter


def call(n: int, command: str) -> dict[str, Any]:
    args = orjson.dumps({"command": command}).decode()
    return {
        "role": "assistant",
        "content": f"THOUGHT: step {n}",
        "tool_calls": [
            {"id": f"c{n}", "type": "function", "function": {"name": "bash", "arguments": args}}
        ],
    }


def result(n: int, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"c{n}", "content": text}


def run(*steps: tuple[str, str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You run one bash command per step."},
        {"role": "user", "content": "Fix the bug."},
    ]
    for n, (command, text) in enumerate(steps):
        out += [call(n, command), result(n, text)]
    return out


def test_keys_are_paths_code_identifiers_and_code_lines_not_plain_words() -> None:
    command = (
        "grep -n 'def _sqlite_datetime_parse' django/db/backends/sqlite3/base.py && "
        "python3 -c 'print(1)'\n    return self.connection.ops.datetime_cast(x)"
    )
    keys = b.keys_of(command, 8, b.STOP)
    assert "django/db/backends/sqlite3/base.py" in keys
    assert "_sqlite_datetime_parse" in keys
    assert "return self.connection.ops.datetime_cast(x)" in keys
    assert "backends" not in keys and "sqlite3" not in keys  # parts of a path, plain words
    assert "python3" not in keys and "grep" not in keys
    assert "base.py" not in keys  # shorter than MIN_LEN


def test_evidence_is_the_results_holding_a_key_and_common_keys_are_trivial() -> None:
    messages = run(
        ("ls", "setup.py\nmodels_helper.py"),
        ("cat a.py", "def compute_total(x): ..."),
        ("cat b.py", "models_helper.py imported"),
        ("cat c.py", "models_helper.py again"),
        ("cat d.py", "models_helper.py and more"),
    )
    ev = b.evidence(messages, "sed -n 1,5p models_helper.py && grep compute_total x", 8)
    assert ev == {"c1": {"compute_total"}}  # models_helper.py is in 4 of 5 results: trivial


def test_survives_whole_truncated_with_the_strings_or_not_cleared() -> None:
    assert b.survives("abc compute_total", {"content": "abc compute_total"}, {"compute_total"})
    assert b.survives(
        "x" * 50 + " compute_total", {"content": "compute_total […]"}, {"compute_total"}
    )
    assert not b.survives("compute_total", {"content": "[…truncated]"}, {"compute_total"})
    cleared = {"content": "[context-proxy: result of bash cleared, 3,214 tokens] compute_total"}
    assert not b.survives("compute_total", cleared, {"compute_total"})
    assert not b.survives("compute_total", None, {"compute_total"})


def test_paired_and_protected() -> None:
    messages = run(("a", "1"), ("b", "2"), ("c", "3"), ("d", "4"))
    assert b.paired(messages)
    assert not b.paired(messages[:-1])  # a call without its result
    assert not b.paired([m for m in messages if m.get("tool_call_id") != "c1"] + [messages[5]])
    newest = b.protected(messages)
    assert newest[0]["content"] == "Fix the bug."
    assert [m.get("tool_call_id") for m in newest[1:] if m["role"] == "tool"] == ["c1", "c2", "c3"]


def test_keep_newest_drops_oldest_whole_exchanges_and_keeps_the_task() -> None:
    tok = TokenCounter().chat_tokenizer(b.MODEL, Policy())
    messages = run(*((f"cmd {n}", "word " * 200) for n in range(6)))
    body = {"model": b.MODEL, "messages": messages}
    out = b.keep_newest(body, tok, 700, {})
    assert out[:2] == messages[:2]
    assert out[2:] == messages[-len(out) + 2 :]
    assert b.paired(out)
    assert tok.count_request({**body, "messages": out}) <= 700
