"""The Codex CLI (from npm, tests/npm_clients.py) runs real tool loops through the proxy:
`codex exec`, then `codex exec resume --last`, against a fake model that asks it to run a
shell command per step (print the step, read a long file in a scratch directory). Codex
always streams over the Responses API. The history goes over the budget step after step:
every forwarded request fits, keeps Codex's setup (its instructions, permissions and
`<environment_context>`) and the task, and pairs every call with its output; usage rows
say `api: "responses"` with cached tokens. A task too long for the window is refused as
a context-length error, which Codex shows as such."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import orjson

from tests.conftest import RunningProxy
from tests.fake_responses import compaction_item, pairing_problem
from tests.fake_upstream import FakeUpstream
from tests.npm_clients import CODEX, client_environment, npm_binary
from tests.server.test_proxy_e2e import usage_rows

WINDOW = 20_000  # Codex's own setup (instructions, nine tools) is about 10k tokens
BUDGET = 16_000
POLICY = f"budget: {{reserve_output: false}}\nmodels:\n  gpt-4o: {{context_window: {WINDOW}}}\n"
STEPS = 6
TASK = "Read the notes in this directory and tell me what they say."


def codex(
    proxy: RunningProxy, home: Path, work: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """`codex exec ...` with the proxy as its model provider (wire_api responses)."""
    provider = (
        f'model_providers.proxy={{name="proxy",base_url="{proxy.url}/v1",'
        f'env_key="PROXY_KEY",wire_api="responses"}}'
    )
    command = [str(npm_binary(CODEX)), "exec", *args[:1], "--skip-git-repo-check",
               "--dangerously-bypass-approvals-and-sandbox", "-c", "model_provider=proxy",
               "-c", provider, "-m", "gpt-4o", *args[1:]]  # fmt: skip
    return subprocess.run(
        command, cwd=work, env=client_environment(home, CODEX_HOME=str(home / ".codex"), PROXY_KEY="sk-codex"),
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def scratch(tmp_path: Path) -> tuple[Path, Path]:
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True)
    work.mkdir()
    lines = (f"note {k}: invoice {1000 + k} was rounded half-up to the cent" for k in range(160))
    (work / "notes.txt").write_text("\n".join(lines) + "\n")  # ~2,500 tokens a read
    return home, work


def setup_of(body: dict[str, Any]) -> list[Any]:
    """The input items before the first answer: Codex's developer messages, the
    environment and the task."""
    items = body["input"]
    roles = ("developer", "system", "user")
    first = next((i for i, item in enumerate(items) if item.get("role") not in roles), len(items))
    return list(items[:first])


def test_codex_exec_and_resume_run_their_loops_through_the_proxy(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, tmp_path: Path
) -> None:
    (policies_dir / "default.yaml").write_text(POLICY)
    proxy = start_proxy()
    upstream.mode, upstream.agent_steps = "agent", STEPS
    home, work = scratch(tmp_path)

    first = codex(proxy, home, work, TASK)
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"Done after {STEPS} steps." in first.stdout
    resumed = codex(proxy, home, work, "resume", "--last", "Read them once more, please.")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Done after {STEPS} steps." in resumed.stdout

    sent = [r.json() for r in upstream.responses_requests]
    assert len(sent) == 2 * (STEPS + 1)
    setup = setup_of(sent[0])
    environment = orjson.dumps(setup).decode()
    assert "<environment_context>" in environment and TASK in environment
    assert any(item.get("role") == "developer" for item in setup)
    for body in sent:
        assert body["input"][: len(setup)] == setup  # kept whole, as Codex sent it
        assert pairing_problem(body) is None
        own = [t for t in body["tools"] if t.get("name") != "context_recall"]
        assert own == sent[0]["tools"]  # the client's; the proxy's recall tool when trimmed
    later = sent[STEPS + 1 :]
    assert all("Read them once more, please." in orjson.dumps(b["input"]).decode() for b in later)

    rows = usage_rows(proxy, at_least=len(sent))
    assert len(rows) == len(sent)
    assert all(r["status"] == 200 and r["api"] == "responses" and r["stream"] for r in rows)
    assert all(r["tokens_after"] <= BUDGET for r in rows)
    assert sum(r["tokens_before"] > BUDGET for r in rows) >= 4  # over the budget, trimmed
    assert all((r["cached_tokens"] or 0) > 0 for r in rows)


def test_codex_shows_a_task_too_long_for_the_window_as_a_context_length_error(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, tmp_path: Path
) -> None:
    # Codex's own instructions and tools (about 10k tokens) are more than this window holds:
    # a task of any length is refused (a task over the budget but within the window is
    # forwarded with the setup's user parts cut to half the budget, then alone).
    (policies_dir / "default.yaml").write_text(POLICY.replace(str(WINDOW), "8000"))
    proxy = start_proxy()
    upstream.mode = "agent"
    home, work = scratch(tmp_path)
    refused = codex(proxy, home, work, "word " * 12_000)
    assert refused.returncode != 0
    shown = refused.stdout + refused.stderr
    assert "context window" in shown.lower() or "context_length_exceeded" in shown, shown[-2000:]
    assert not upstream.responses_requests
    rows = usage_rows(proxy)
    assert rows and all(r["status"] == 400 and r["api"] == "responses" for r in rows)


def test_codex_runs_its_loop_through_a_model_that_asks_the_proxy_for_the_past(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, tmp_path: Path
) -> None:
    """A model that calls the proxy's context_recall tool before each step of a trimmed
    request: the proxy answers it and goes on in the same stream; Codex sees only its own
    tool calls and finishes its loop."""
    (policies_dir / "default.yaml").write_text(POLICY)
    proxy = start_proxy()
    upstream.mode, upstream.agent_steps = "agent_recall", STEPS
    home, work = scratch(tmp_path)
    done = codex(proxy, home, work, TASK)
    print(
        "ROWS",
        [
            (r["status"], r["error"], r["tokens_before"], r["tokens_after"], r["budget"])
            for r in usage_rows(proxy)
        ],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"Done after {STEPS} steps." in done.stdout
    assert "context_recall" not in done.stdout + done.stderr
    sent = [r.json() for r in upstream.responses_requests]
    continued = [b for b in sent if b["input"][-1].get("type") == "function_call_output"
                 and str(b["input"][-1].get("call_id")).startswith("call_recall")]  # fmt: skip
    assert continued, "no request of the proxy's own round"
    assert all(pairing_problem(b) is None for b in sent)
    rows = usage_rows(proxy, at_least=STEPS + 1)
    assert sum(r["recall_rounds"] for r in rows) == len(continued)
    assert all(r["status"] == 200 and r["tokens_after"] <= BUDGET for r in rows)


def test_codex_compacts_through_the_proxy_and_goes_on_from_its_compaction(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, tmp_path: Path
) -> None:
    """Codex with the proxy as its OpenAI provider compacts on its own (remote compaction:
    a Responses request ending with a `compaction_trigger` item, answered with one
    `compaction` item) against a fake that compacts; it goes on with that item at the
    head of its history. The trigger and the item pass the proxy as they came, and the
    loop ends as it would without compaction."""
    (policies_dir / "default.yaml").write_text(POLICY)
    proxy = start_proxy()
    upstream.mode, upstream.agent_steps = "agent_compacting", STEPS
    home, work = scratch(tmp_path)
    command = [str(npm_binary(CODEX)), "exec", "--skip-git-repo-check",
               "--dangerously-bypass-approvals-and-sandbox",
               "-c", f'openai_base_url="{proxy.url}/v1"', "-c", "model_provider=openai",
               "-c", "model_auto_compact_token_limit=5000", "-m", "gpt-4o", TASK]  # fmt: skip
    done = subprocess.run(
        command, cwd=work, capture_output=True, text=True, timeout=300, check=False,
        env=client_environment(home, CODEX_HOME=str(home / ".codex"), OPENAI_API_KEY="sk-codex"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"Done after {STEPS} steps." in done.stdout
    bodies = [(r.body, r.json()) for r in upstream.responses_requests]
    triggers = [b for _, b in bodies if b["input"][-1].get("type") == "compaction_trigger"]
    assert triggers, "Codex never compacted"
    made = {orjson.dumps(compaction_item(raw)) for raw, b in bodies if b in triggers}
    carried = [
        (raw, b) for raw, b in bodies if any(i.get("type") == "compaction" for i in b["input"])
    ]
    assert carried, "Codex never went on from its compaction"
    for raw, body in carried:  # the item as the upstream made it, byte for byte, in place
        (item,) = [i for i in body["input"] if i.get("type") == "compaction"]
        assert orjson.dumps(item) in made and orjson.dumps(item) in raw
        assert body["input"][: len(setup_of(body))] == setup_of(body)
    rows = usage_rows(proxy, at_least=len(bodies))
    assert all(r["status"] == 200 and r["api"] == "responses" for r in rows)
    assert all(r["tokens_after"] <= BUDGET for r in rows)
    assert all(pairing_problem(b) is None for _, b in bodies)
