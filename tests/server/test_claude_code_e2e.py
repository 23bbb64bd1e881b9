"""Claude Code (from npm, tests/npm_clients.py) runs real tool loops through the proxy over
Anthropic's Messages API: `claude -p`, then `claude -p --continue`, against a fake model
(tests/fake_messages.py) that asks it to run a shell command per step through its Bash
tool (print the step, read a long file in a scratch directory). The history goes over the
budget step after step: every forwarded request passes the API's own checks, fits, keeps
Claude Code's setup (its system prompt and first user message) and its cache points; usage
rows say `api: "messages"`. A task too long for the window is refused as Anthropic refuses
it ("prompt is too long"), which Claude Code shows."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.policy.model import hash_key
from tests.conftest import RunningProxy
from tests.fake_messages import problem
from tests.fake_upstream import FakeUpstream
from tests.npm_clients import CLAUDE_CODE, client_environment, npm_binary
from tests.server.test_codex_cli_e2e import scratch
from tests.server.test_proxy_e2e import usage_rows

KEY, TEAM_KEY = "cp-claude-code", "sk-ant-team-key"
MODEL = "claude-sonnet-4-6"
WINDOW, BUDGET = 50_000, 40_000  # Claude Code's own setup (system, 24 tools) is ~30k tokens
STEPS = 8
TASK = "Read the notes in this directory and tell me what they say."


@pytest.fixture
def code_proxy(
    start_proxy: Any, policies_dir: Path, fake_upstream_server: Any, monkeypatch: Any
) -> RunningProxy:
    _, base = fake_upstream_server
    monkeypatch.setenv("CODE_TEAM_ANTHROPIC_KEY", TEAM_KEY)
    (policies_dir / "default.yaml").write_text(
        f'team: code\nkeys: ["{hash_key(KEY)}"]\n'
        f"upstream: {{anthropic: {{base_url: '{base}', api_key_env: CODE_TEAM_ANTHROPIC_KEY}}}}\n"
        f"budget: {{reserve_output: false}}\nmodels:\n  {MODEL}: {{context_window: {WINDOW}}}\n"
    )
    return start_proxy()  # type: ignore[no-any-return]


def claude(
    proxy: RunningProxy, home: Path, work: Path, prompt: str, *flags: str
) -> subprocess.CompletedProcess[str]:
    """`claude -p` with the prompt on stdin (its tool list flag takes every word after it)."""
    command = [
        str(npm_binary(CLAUDE_CODE)),
        "-p",
        "--model",
        MODEL,
        *flags,
        "--allowedTools",
        "Bash",
    ]
    environment = client_environment(home, ANTHROPIC_BASE_URL=proxy.url, ANTHROPIC_API_KEY=KEY)
    return subprocess.run(
        command, input=prompt, cwd=work, env=environment, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip


def without_cache_points(message: dict[str, Any]) -> dict[str, Any]:
    content = message["content"]
    if isinstance(content, list):
        content = [{k: v for k, v in b.items() if k != "cache_control"} for b in content]
    return {**message, "content": content}


def cache_points(body: dict[str, Any]) -> int:
    blocks = [*body["system"]] if isinstance(body["system"], list) else []
    for message in body["messages"]:
        if isinstance(message["content"], list):
            blocks += message["content"]
    return sum("cache_control" in block for block in blocks if isinstance(block, dict))


def test_claude_code_runs_its_loop_through_the_proxy_and_continues_it(
    code_proxy: RunningProxy, upstream: FakeUpstream, tmp_path: Path
) -> None:
    upstream.mode, upstream.agent_steps = "agent", STEPS
    home, work = scratch(tmp_path)
    first = claude(code_proxy, home, work, TASK)
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    assert f"Done after {STEPS} steps." in first.stdout
    again = claude(code_proxy, home, work, "Read them once more, please.", "--continue")
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert f"Done after {STEPS} steps." in again.stdout

    looped = [r for r in upstream.messages_requests if r.json().get("tools")]
    assert len(looped) >= 2 * (STEPS + 1)
    opening = looped[0].json()
    for rec in looped:
        body = rec.json()
        assert rec.headers["x-api-key"] == TEAM_KEY
        assert body["system"] == opening["system"]  # the setup, as Claude Code sent it
        # Claude Code moves its own cache point to the newest message; a turn whose whole
        # history between was dropped is merged into it (the API wants roles to alternate)
        setup = without_cache_points(opening["messages"][0])["content"]
        first = without_cache_points(body["messages"][0])["content"]
        assert first[: len(setup)] == setup
        assert 1 <= cache_points(body) <= 4
    rows = usage_rows(code_proxy, at_least=len(upstream.messages_requests))
    assert all(r["api"] == "messages" and r["status"] == 200 for r in rows)
    assert all(r["tokens_after"] <= BUDGET for r in rows)
    assert sum(r["tokens_before"] > BUDGET for r in rows) >= 4  # over the budget, trimmed
    assert sum((r["cached_tokens"] or 0) > 0 for r in rows) == len(rows)
    sent = orjson.dumps([r.json() for r in looped[-3:]]).decode()
    assert "Read them once more, please." in sent


def test_claude_code_runs_its_loop_through_a_model_that_asks_the_proxy_for_the_past(
    code_proxy: RunningProxy, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A model that calls the proxy's context_recall tool before each step of a trimmed
    request: the proxy answers it and goes on in the same stream (thinking and signatures
    kept for the continuation); Claude Code sees only its own tools and finishes."""
    upstream.mode, upstream.agent_steps = "agent_recall", STEPS
    home, work = scratch(tmp_path)
    done = claude(code_proxy, home, work, TASK)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert f"Done after {STEPS} steps." in done.stdout
    continued = [r.json() for r in upstream.messages_requests
                 if "call_recall" in orjson.dumps(r.json()["messages"][-1]).decode()]  # fmt: skip
    assert continued, "no request of the proxy's own round"
    assert all(problem(body) is None for body in continued)
    rows = usage_rows(code_proxy, at_least=len(upstream.messages_requests) - len(continued))
    assert sum(r["recall_rounds"] for r in rows) == len(continued)
    assert all(r["status"] == 200 and r["tokens_after"] <= BUDGET for r in rows)


def test_claude_code_shows_a_task_too_long_as_prompt_too_long(
    code_proxy: RunningProxy, upstream: FakeUpstream, tmp_path: Path
) -> None:
    home, work = scratch(tmp_path)
    refused = claude(code_proxy, home, work, "word " * 40_000)
    shown = (refused.stdout + refused.stderr).lower()
    assert "prompt is too long" in shown, shown[-2000:]
    assert not upstream.messages_requests
    assert usage_rows(code_proxy)[-1]["status"] == 400


LOCAL = "qwen3-coder-30b"  # a model served locally behind an Anthropic-shaped endpoint


@pytest.mark.parametrize(("window", "output"), [(64_000, ""), (64_000, "8192"), (128_000, "")])
def test_claude_codes_setup_leaves_room_for_history_at_local_windows(
    start_proxy: Any, policies_dir: Path, fake_upstream_server: Any, upstream: FakeUpstream,
    tmp_path: Path, monkeypatch: Any, window: int, output: str,
) -> None:  # fmt: skip
    """Claude Code's own setup (system prompt, tools, the task: ~18k tokens) at the windows
    local models run with, 64k (with its answer limit of 32,000, and lowered to 8,192 by
    CLAUDE_CODE_MAX_OUTPUT_TOKENS) and 128k: every forwarded request fits and keeps the
    setup and at least a fifth of the budget of history (the figures in the README)."""
    _, base = fake_upstream_server
    monkeypatch.setenv("CODE_TEAM_ANTHROPIC_KEY", TEAM_KEY)
    (policies_dir / "default.yaml").write_text(
        f'team: code\nkeys: ["{hash_key(KEY)}"]\n'
        f"upstream: {{anthropic: {{base_url: '{base}', api_key_env: CODE_TEAM_ANTHROPIC_KEY}}}}\n"
        f"models:\n  {LOCAL}: {{context_window: {window}}}\n"
    )
    proxy = start_proxy()
    upstream.mode, upstream.agent_steps = "agent", 40
    home, work = scratch(tmp_path)
    notes = work / "notes.txt"
    notes.write_text(notes.read_text() * 2)  # ~5k tokens a read (under Bash's output limit)
    command = [str(npm_binary(CLAUDE_CODE)), "-p", "--model", LOCAL, "--allowedTools", "Bash"]
    extra = {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": output} if output else {}
    environment = client_environment(
        home, ANTHROPIC_BASE_URL=proxy.url, ANTHROPIC_API_KEY=KEY, **extra
    )
    done = subprocess.run(
        command, input=TASK, cwd=work, env=environment, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    looped = [r.json() for r in upstream.messages_requests if r.json().get("tools")]
    rows = [r for r in usage_rows(proxy, at_least=len(looped)) if r["model"] == LOCAL]
    assert rows and all(r["status"] == 200 for r in rows)
    trimmed = [r for r in rows if r["tokens_after"] < r["tokens_before"]]
    assert trimmed, (
        "the loop never went over the budget",
        [(r["tokens_before"], r["budget"]) for r in rows],
        done.stdout[-2000:],
    )
    budget = trimmed[0]["budget"]
    first = next(r for r in rows if r["tokens_before"] > 0)
    setup = first["tokens_before"]  # the first request: the setup and the task alone
    assert all(r["tokens_after"] <= r["budget"] for r in rows)
    # What is left for history beside the setup, kept: at least a fifth of the budget. (At
    # 64k the room beside the setup is ~14k and a step holds a ~5k read, kept whole or
    # cleared: runs keep 7.9-14k, the step sequence being Claude Code's own from run to run.)
    assert min(r["tokens_after"] for r in trimmed) - setup >= budget // 5
    # The setup as Claude Code sent it: its system prompt never cut (Claude Code itself
    # varies it from one request to the next), its task in every request.
    for body in looped:
        assert "context-proxy" not in orjson.dumps(body["system"]).decode()
        assert TASK in orjson.dumps(body["messages"][0]).decode()
    print(f"\nClaude Code at {window:,}: setup {setup:,} tokens, budget {budget:,}, "
          f"trimmed requests {len(trimmed)} of {len(rows)}, after "
          f"{min(r['tokens_after'] for r in trimmed):,}-{max(r['tokens_after'] for r in trimmed):,}")  # fmt: skip
