"""Inclusion log through the HTTP app: one line per request with ids, no content, opt-in."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.server.pipeline import plan_step
from tests.conftest import RunningProxy

SECRET = "zebracobalt"  # a word only message content holds: it must never reach the log


def agent_body(turns: int = 12) -> dict[str, Any]:
    """Over a 1,000-token window: old turns with ids are dropped, the newest kept."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        text = f"{SECRET}{i} " + "alpha beta gamma " * 30
        messages.append({"role": "user", "content": text, "x_context": {"id": f"turn-{i}"}})
        messages.append({"role": "assistant", "content": f"{SECRET} ok " * 20})
    messages.append(
        {
            "role": "system",
            "content": f"{SECRET} remember " * 50,
            "x_context": {"section": "memory", "id": "mem-1"},
        }
    )
    messages.append(
        {
            "role": "user",
            "content": f'<context section="retrieved_context" id="doc-7">{SECRET} doc</context> '
            "What now?",
        }
    )
    return {"model": "gpt-4o", "messages": messages}


def small_window(policies_dir: Path) -> None:
    """A 1,000-token window; inline tags read in user messages too (the app puts its
    retrieved documents there)."""
    (policies_dir / "default.yaml").write_text(
        "models:\n  gpt-4o: {context_window: 1000}\nbudget: {ratio: 1.0}\n"
        "tags: {inline_in_user: true}\n"
    )


def lines(path: Path, at_least: int = 1) -> list[dict[str, Any]]:
    """The log's lines, waiting briefly: they are written off the request path."""
    deadline = time.monotonic() + 5
    while True:
        rows = [orjson.loads(x) for x in path.read_bytes().splitlines()] if path.exists() else []
        if len(rows) >= at_least or time.monotonic() > deadline:
            return rows
        time.sleep(0.01)


def test_over_budget_request_names_each_id_with_its_action(
    start_proxy: Any, policies_dir: Path, tmp_path: Path
) -> None:
    small_window(policies_dir)
    log = tmp_path / "inclusion.jsonl"
    proxy: RunningProxy = start_proxy(inclusion_log=str(log))
    response = httpx.post(proxy.url + "/v1/chat/completions", json=agent_body())
    assert response.status_code == 200
    assert int(response.headers["x-context-trimmed"]) > 0
    (row,) = lines(log)
    assert row["request_id"] == response.headers["x-request-id"]
    assert (row["team"], row["model"]) == ("default", "gpt-4o")
    assert row["budget"] == int(response.headers["x-context-budget"])
    assert (
        row["tokens_before"]
        > row["tokens_after"]
        == int(response.headers["x-context-tokens-after"])
    )
    assert row["ts"].endswith("Z")
    ids = {entry["id"]: entry for entry in row["ids"]}
    assert set(ids) == {f"turn-{i}" for i in range(12)} | {"mem-1", "doc-7"}
    assert [e["id"] for e in row["ids"]][:2] == ["turn-0", "turn-1"]  # message order
    assert ids["turn-0"]["action"] == "kept"  # the setup: before the first answer
    assert ids["turn-1"]["action"] == "dropped"
    assert ids["turn-1"]["tokens"] > 0 == ids["turn-1"]["tokens_after"]
    assert ids["turn-11"]["action"] == "kept"
    assert ids["turn-11"]["tokens"] == ids["turn-11"]["tokens_after"] > 0
    assert ids["doc-7"]["action"] == "kept"
    assert {e["action"] for e in row["ids"]} <= {
        "kept",
        "truncated",
        "cleared",
        "dropped",
        "summarized",
        "deduped",
    }
    assert row["ids_omitted"] == 0
    assert SECRET not in log.read_text()


def test_one_line_per_request_and_whole_lines_after_shutdown(
    start_proxy: Any, policies_dir: Path, tmp_path: Path
) -> None:
    small_window(policies_dir)
    log = tmp_path / "inclusion.jsonl"
    proxy: RunningProxy = start_proxy(inclusion_log=str(log))
    seen = []
    with httpx.Client() as http:
        for _ in range(5):
            seen.append(http.post(proxy.url + "/v1/chat/completions", json=agent_body()))
    assert [r.status_code for r in seen] == [200] * 5
    rows = lines(log, at_least=5)
    assert [r["request_id"] for r in rows] == [r.headers["x-request-id"] for r in seen]
    assert log.read_bytes().endswith(b"\n")


def test_nothing_written_for_a_request_without_ids(
    start_proxy: Any, policies_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small_window(policies_dir)
    log = tmp_path / "inclusion.jsonl"
    built: list[str] = []
    real = plan_step.inclusion_line
    monkeypatch.setattr(plan_step, "inclusion_line", lambda *a: built.append("x") or real(*a))
    proxy: RunningProxy = start_proxy(inclusion_log=str(log))
    body = agent_body()
    for m in body["messages"]:
        tag = m.pop("x_context", None)
        if tag and "section" in tag:
            m["x_context"] = {"section": tag["section"]}  # a tag, but no id
    body["messages"][-1]["content"] = "What now?"
    response = httpx.post(proxy.url + "/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert int(response.headers["x-context-trimmed"]) > 0
    httpx.post(
        proxy.url + "/v1/chat/completions",
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
    )
    time.sleep(0.2)
    assert not log.exists() or log.read_bytes() == b""
    assert built == []  # no report was even built


def test_nothing_written_or_built_without_the_flag(
    start_proxy: Any, policies_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small_window(policies_dir)

    def boom(*args: Any) -> None:
        raise AssertionError("the report must not be built with the log off")

    monkeypatch.setattr(plan_step, "inclusion_line", boom)
    monkeypatch.setattr(plan_step, "carries_ids", boom)
    proxy: RunningProxy = start_proxy()
    response = httpx.post(proxy.url + "/v1/chat/completions", json=agent_body())
    assert response.status_code == 200
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policies", "usage.jsonl"]


def test_plan_endpoint_reports_ids_and_logs_nothing(
    start_proxy: Any, policies_dir: Path, tmp_path: Path
) -> None:
    small_window(policies_dir)
    log = tmp_path / "inclusion.jsonl"
    proxy: RunningProxy = start_proxy(inclusion_log=str(log))
    response = httpx.post(proxy.url + "/v1/context/plan", json=agent_body())
    assert response.status_code == 200
    items = response.json()["report"]["items"]
    by_id = {it["id"]: it for it in items if "id" in it}
    assert set(by_id) == {f"turn-{i}" for i in range(12)} | {"mem-1", "doc-7"}
    assert by_id["turn-0"]["action"] == "keep"  # the setup, kept whole
    assert by_id["turn-1"]["action"] == "drop"
    assert {"tokens", "tokens_after", "action"} <= set(by_id["doc-7"])
    time.sleep(0.2)
    assert not log.exists() or log.read_bytes() == b""


def test_a_refused_request_writes_no_line(
    start_proxy: Any, policies_dir: Path, tmp_path: Path
) -> None:
    (policies_dir / "default.yaml").write_text(
        "models:\n  gpt-4o: {context_window: 100}\nbudget: {ratio: 1.0}\n"
    )
    log = tmp_path / "inclusion.jsonl"
    proxy: RunningProxy = start_proxy(inclusion_log=str(log))
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "word " * 500, "x_context": {"id": "q"}}],
    }
    response = httpx.post(proxy.url + "/v1/chat/completions", json=body)
    assert response.status_code == 400
    time.sleep(0.2)
    assert not log.exists() or log.read_bytes() == b""


def test_lines_queued_at_shutdown_are_flushed(
    policies_dir: Path, tmp_path: Path, upstream_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.server.app.app import create_app
    from proxy.server.core.settings import Settings
    from proxy.usage import writer
    from tests.conftest import serve

    monkeypatch.setattr(writer, "_WAKE_DELAY_S", 60.0)  # only the shutdown writes them
    small_window(policies_dir)
    log = tmp_path / "inclusion.jsonl"
    settings = Settings(
        policies=str(policies_dir),
        upstream=upstream_url,
        usage_log=str(tmp_path / "usage.jsonl"),
        watch_policies=False,
        inclusion_log=str(log),
    )
    with serve(create_app(settings)) as url:
        ids = [
            httpx.post(url + "/v1/chat/completions", json=agent_body()).headers["x-request-id"]
            for _ in range(3)
        ]
    rows = [orjson.loads(x) for x in log.read_bytes().splitlines()]
    assert [r["request_id"] for r in rows] == ids


def test_within_budget_every_id_is_kept_and_streamed_requests_log_too(
    start_proxy: Any, policies_dir: Path, tmp_path: Path
) -> None:
    (policies_dir / "default.yaml").write_text("tags: {inline_in_user: true}\n")
    log = tmp_path / "inclusion.jsonl"
    proxy: RunningProxy = start_proxy(inclusion_log=str(log))
    body = agent_body(turns=2)
    plain = httpx.post(proxy.url + "/v1/chat/completions", json=body)
    assert plain.status_code == 200 and plain.headers["x-context-trimmed"] == "0"
    with httpx.stream(
        "POST", proxy.url + "/v1/chat/completions", json={**body, "stream": True}
    ) as streamed:
        assert streamed.status_code == 200
        streamed.read()
    rows = lines(log, at_least=2)
    assert [r["request_id"] for r in rows] == [
        plain.headers["x-request-id"],
        streamed.headers["x-request-id"],
    ]
    for row in rows:
        assert [e["id"] for e in row["ids"]] == ["turn-0", "turn-1", "mem-1", "doc-7"]
        assert {e["action"] for e in row["ids"]} == {"kept"}
        assert all(e["tokens"] == e["tokens_after"] > 0 for e in row["ids"])
        assert row["tokens_before"] == row["tokens_after"]


def test_responses_api_requests_log_their_ids(
    start_proxy: Any, policies_dir: Path, tmp_path: Path
) -> None:
    small_window(policies_dir)
    log = tmp_path / "inclusion.jsonl"
    proxy: RunningProxy = start_proxy(inclusion_log=str(log))
    items = [
        {"type": "message", **m} for m in agent_body()["messages"][1:] if m["role"] != "system"
    ]
    body = {"model": "gpt-4o", "instructions": "You are terse.", "input": items}
    response = httpx.post(proxy.url + "/v1/responses", json=body)
    assert response.status_code == 200
    assert int(response.headers["x-context-trimmed"]) > 0
    (row,) = lines(log)
    assert row["request_id"] == response.headers["x-request-id"]
    ids = {e["id"]: e["action"] for e in row["ids"]}
    assert set(ids) == {f"turn-{i}" for i in range(12)} | {"doc-7"}
    assert ids["turn-0"] == "kept"  # the setup
    assert ids["turn-1"] == "dropped" and ids["turn-11"] == "kept"
    assert SECRET not in log.read_text()


def test_ids_on_tool_results_are_not_read(
    start_proxy: Any, policies_dir: Path, tmp_path: Path
) -> None:
    """A tool result is the outside world's text: its x_context (an id among them) is
    dropped unread, so it names nothing in the log; the task's id still does."""
    (policies_dir / "default.yaml").write_text(
        "models:\n  gpt-4o: {context_window: 3000}\nbudget: {ratio: 1.0}\n"
    )
    log = tmp_path / "inclusion.jsonl"
    proxy: RunningProxy = start_proxy(inclusion_log=str(log))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You run bash."},
        {"role": "user", "content": "Fix it.", "x_context": {"id": "task"}},
    ]
    for i in range(10):
        args = orjson.dumps({"command": f"cat file{i}.py"}).decode()
        call = {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": args}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append(
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "content": f"{SECRET} " + f"line of file{i} " * 100,
                "x_context": {"id": f"res-{i}", "priority": "required"},
            }
        )
    response = httpx.post(
        proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": messages}
    )
    assert response.status_code == 200
    assert int(response.headers["x-context-trimmed"]) > 0  # "required" was not read
    (row,) = lines(log)
    assert [(e["id"], e["action"]) for e in row["ids"]] == [("task", "kept")]
    assert SECRET not in log.read_text()
