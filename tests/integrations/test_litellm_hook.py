"""The LiteLLM hook in process: the policy of LiteLLM's team or key, the plan's figures in
the request's metadata, Responses bodies written back as items, and plans byte-identical to
what the proxy itself forwards for the same body and policy, over the benchmark corpora."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import orjson
import pytest
from litellm.exceptions import ContextWindowExceededError

from proxy.integrations.litellm_hook import ContextProxyHook
from tests.conftest import RunningProxy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from quality_sets import SETS

POLICY = "budget: {reserve_output: false}\nmodels:\n  gpt-4o: {context_window: %d}\n"


def hooked(hook: ContextProxyHook, data: dict[str, Any], team: str | None = None) -> dict[str, Any]:
    key = SimpleNamespace(team_alias=team, team_id=None, key_alias=None)
    out: dict[str, Any] = asyncio.run(
        hook.async_pre_call_hook(key, None, dict(data), "acompletion")
    )
    return out


def test_the_teams_policy_is_chosen_and_the_figures_go_into_the_metadata(tmp_path: Path) -> None:
    (tmp_path / "default.yaml").write_text(POLICY % 100_000)
    (tmp_path / "small.yaml").write_text("team: small\n" + POLICY % 1000)
    hook = ContextProxyHook(tmp_path)
    chat = [{"role": "user", "content": f"turn {k} " + "word " * 60} for k in range(30)]
    data = {"model": "gpt-4o", "messages": chat, "stream": True, "metadata": {"user": "u1"}}
    roomy, small = hooked(hook, data), hooked(hook, data, team="small")
    assert roomy["messages"] == chat and roomy["metadata"]["context_proxy"]["policy"] == "default"
    figures = small["metadata"]["context_proxy"]
    assert figures["team"] == "small" and figures["tokens_after"] <= 800 < figures["tokens_before"]
    assert small["metadata"]["spend_logs_metadata"]["context_proxy"] == figures
    assert small["metadata"]["user"] == "u1" and small["stream"] is True  # the rest untouched
    assert len(small["messages"]) < len(chat)


def test_a_request_that_cannot_fit_is_litellms_context_window_error(tmp_path: Path) -> None:
    (tmp_path / "default.yaml").write_text(POLICY % 1000)
    with pytest.raises(ContextWindowExceededError):
        hooked(ContextProxyHook(tmp_path), {"model": "gpt-4o", "messages": [
            {"role": "user", "content": "word " * 3000}]})  # fmt: skip


def test_a_responses_body_is_planned_and_written_back_as_items(tmp_path: Path) -> None:
    (tmp_path / "default.yaml").write_text(POLICY % 1000)
    items = [{"role": "user", "content": f"turn {k} " + "word " * 60} for k in range(20)]
    data = {"model": "gpt-4o", "instructions": "Be brief.", "input": items}
    key = SimpleNamespace(team_alias=None, team_id=None, key_alias=None)
    out = asyncio.run(ContextProxyHook(tmp_path).async_pre_call_hook(key, None, data, "aresponses"))
    assert isinstance(out, dict) and out["instructions"] == "Be brief."
    assert 0 < len(out["input"]) < len(items) and out["input"][-1] == items[-1]
    assert "messages" not in out


@pytest.mark.parametrize(
    ("name", "budget"), [("agent-runs", 16000), ("locomo", 4000), ("tau-airline", 2800)]
)
def test_the_hooks_plans_are_the_proxys_byte_for_byte(
    start_proxy: Any, policies_dir: Path, name: str, budget: int
) -> None:
    # The hook offers no recall tool (LiteLLM, not the hook, reads the model's answer): its
    # plans are the proxy's with the tool off, which leaves no room for the tool.
    (policies_dir / "default.yaml").write_text(
        POLICY % round(budget / 0.8) + "recall: {tool: off}\n"
    )
    proxy: RunningProxy = start_proxy()
    hook = ContextProxyHook(policies_dir)
    streams = SETS[name](2)
    bodies = [p.body for s in streams for p in s.points][-25:]
    trimmed = 0
    for body in bodies:
        planned = httpx.post(proxy.url + "/v1/context/plan", content=orjson.dumps(body), timeout=30)
        if planned.status_code != 200:
            with pytest.raises(ContextWindowExceededError):
                hooked(hook, body)
            continue
        answer = planned.json()
        trimmed += answer["report"]["tokens_after"] < answer["report"]["tokens_before"]
        mine = hooked(hook, body)
        assert orjson.dumps(mine["messages"]) == orjson.dumps(answer["request"]["messages"])
    assert trimmed >= 5


def test_the_proxys_usage_rows_are_written_once_litellm_has_the_answer(tmp_path: Path) -> None:
    (tmp_path / "default.yaml").write_text("team: research\n" + POLICY % 1000)
    log = tmp_path / "usage.jsonl"
    hook = ContextProxyHook(tmp_path, usage_log=log)
    chat = [{"role": "user", "content": f"turn {k} " + "word " * 60} for k in range(30)]
    planned = hooked(hook, {"model": "gpt-4o", "messages": chat})
    usage = SimpleNamespace(prompt_tokens=700, completion_tokens=9,
                            prompt_tokens_details=SimpleNamespace(cached_tokens=512))  # fmt: skip
    kwargs = {"model": "gpt-4o", "stream": False, "call_type": "acompletion",
              "litellm_params": {"metadata": planned["metadata"]}}  # fmt: skip
    asyncio.run(hook.async_log_success_event(kwargs, SimpleNamespace(usage=usage), None, None))
    failed = {**kwargs, "exception": ContextWindowExceededError("too long", "gpt-4o", "x")}
    asyncio.run(hook.async_log_failure_event(failed, None, None, None))
    rows = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    figures = planned["metadata"]["context_proxy"]
    assert rows[0]["team"] == "research" and rows[0]["status"] == 200
    assert rows[0]["tokens_before"] == figures["tokens_before"] > rows[0]["tokens_after"]
    assert (rows[0]["prompt_tokens"], rows[0]["completion_tokens"], rows[0]["cached_tokens"]) == (
        700,
        9,
        512,
    )
    assert rows[0]["usage_source"] == "upstream" and rows[0]["api"] == "chat"
    assert rows[1]["status"] == 400 and rows[1]["error"] == "ContextWindowExceededError"


def test_the_hook_plans_in_a_worker_thread_never_on_litellms_loop(tmp_path: Path) -> None:
    """Even a small body: measuring one to choose would walk it on the loop too."""
    hook = ContextProxyHook(tmp_path)
    threads: list[int] = []
    planned = hook.plan

    def plan(body: dict[str, Any], policy: Any) -> Any:
        threads.append(threading.get_ident())
        return planned(body, policy)

    hook.plan = plan  # type: ignore[method-assign]
    data = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi " * 60_000}]}

    async def call() -> int:
        await hook.async_pre_call_hook(None, None, dict(data), "acompletion")
        return threading.get_ident()

    loop_thread = asyncio.run(call())
    assert threads and threads[0] != loop_thread
