"""Every API's requests replayed through the proxy give what they gave when the recording
was made (tests/server/data/replay.json): the body and headers the upstream received, the
status, headers and body the client got, and the usage row, byte for byte but for what
differs by run (dates, request ids, ports, timings).

Chat completions, the Responses API and the Messages API (plain, streamed, over budget,
agent loops, refusals, bad bodies), count_tokens, the plan route and passthrough. Record
again (only when a change of behaviour is meant) with REPLAY_RECORD=1."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import orjson

from proxy.policy.model import hash_key
from tests.conftest import RunningProxy
from tests.fake_upstream import FakeUpstream
from tests.server.test_proxy_e2e import usage_rows
from tests.server.test_responses_e2e import TOOLS, agent_loop, conversation

GOLDEN = Path(__file__).parent / "data" / "replay.json"
KEY, QUOTA_KEY = "cp-replay", "cp-replay-quota"
# Differ from run to run, or from machine to machine: left out of what is compared.
VARYING_HEADERS = {"date", "server", "x-request-id", "host", "retry-after"}
VARYING_ROW = {"ts", "request_id", "latency_ms", "upstream_ms"}
# An exact tokenizer for the Messages cases too: an estimated model's count follows the
# calibration, which the answers of the cases before move as they are booked.
CLAUDE = "gpt-4o-mini"


def policies(folder: Path) -> None:
    windows = f"models:\n  gpt-4o: {{context_window: 4000}}\n  {CLAUDE}: {{context_window: 4000}}\n"
    (folder / "default.yaml").write_text(f'keys: ["{hash_key(KEY)}"]\n' + windows)
    (folder / "quota.yaml").write_text(
        f'team: quota\nkeys: ["{hash_key(QUOTA_KEY)}"]\n'
        "quotas: {daily_tokens: 1, hard_limit: true}\n" + windows
    )


def chat_messages(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for k in range(turns):
        out.append({"role": "user", "content": f"Question {k}: " + "about the ledger " * 30})
        out.append({"role": "assistant", "content": f"Answer {k}: " + "the totals round " * 30})
    out.append({"role": "user", "content": "And the last one?"})
    return out


def chat_agent(calls: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": "Read the files and fix it."}]
    for k in range(calls):
        call = {"id": f"c{k}", "type": "function",
                "function": {"name": "read_file", "arguments": f'{{"path": "f{k}.py"}}'}}  # fmt: skip
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        out.append({"role": "tool", "tool_call_id": f"c{k}", "content": f"file {k} " * 120})
    return out


def messages_agent(calls: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": "Read the files and fix it."}]
    for k in range(calls):
        out.append(
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": f"t{k}",
                        "name": "read_file",
                        "input": {"path": f"f{k}"},
                    }
                ],
            }
        )
        out.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"t{k}", "content": f"file {k} " * 120}]})  # fmt: skip
    return out


def cases() -> list[tuple[str, str, str, Any, str]]:
    """(name, method, path, body, key) for every request replayed."""
    tool = {"name": "read_file", "description": "Read a file.",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}  # fmt: skip
    chat_tool = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
    msg = {"model": CLAUDE, "max_tokens": 64}
    return [
        ("chat", "POST", "/v1/chat/completions",
         {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, KEY),
        ("chat stream", "POST", "/v1/chat/completions",
         {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]}, KEY),
        ("chat over budget", "POST", "/v1/chat/completions",
         {"model": "gpt-4o", "max_tokens": 100, "messages": chat_messages(20)}, KEY),
        ("chat agent stream", "POST", "/v1/chat/completions",
         {"model": "gpt-4o", "stream": True, "tools": chat_tool, "messages": chat_agent(20)}, KEY),
        ("chat refused", "POST", "/v1/chat/completions",
         {"model": "gpt-4o", "messages": [{"role": "system", "content": "rule " * 5000},
                                          {"role": "user", "content": "hi"}]}, KEY),
        ("chat bad", "POST", "/v1/chat/completions", {"model": "gpt-4o", "messages": 3}, KEY),
        ("chat no key", "POST", "/v1/chat/completions", {"model": "gpt-4o", "messages": []}, ""),
        ("chat quota 1", "POST", "/v1/chat/completions",
         {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, QUOTA_KEY),
        ("chat quota 2", "POST", "/v1/chat/completions",
         {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, QUOTA_KEY),
        ("responses", "POST", "/v1/responses", {"model": "gpt-4o", "input": "hi"}, KEY),
        ("responses stream", "POST", "/v1/responses",
         {"model": "gpt-4o", "input": "hi", "stream": True}, KEY),
        ("responses over budget", "POST", "/v1/responses",
         {"model": "gpt-4o", "input": conversation(30), "max_output_tokens": 100}, KEY),
        ("responses agent stream", "POST", "/v1/responses",
         {"model": "gpt-4o", "input": agent_loop(30), "tools": TOOLS, "stream": True}, KEY),
        ("responses bad", "POST", "/v1/responses", {"model": "gpt-4o", "input": 7}, KEY),
        ("messages", "POST", "/v1/messages",
         {**msg, "messages": [{"role": "user", "content": "hi"}]}, KEY),
        ("messages stream", "POST", "/v1/messages",
         {**msg, "stream": True, "messages": [{"role": "user", "content": "hi"}]}, KEY),
        ("messages agent", "POST", "/v1/messages",
         {**msg, "system": "Be brief.", "tools": [tool], "messages": messages_agent(20)}, KEY),
        ("messages bad", "POST", "/v1/messages", {**msg, "tools": 3, "messages": []}, KEY),
        ("count tokens", "POST", "/v1/messages/count_tokens",
         {"model": CLAUDE, "messages": messages_agent(3)}, KEY),
        ("plan chat", "POST", "/v1/context/plan",
         {"model": "gpt-4o", "messages": chat_messages(20)}, KEY),
        ("plan messages", "POST", "/v1/context/plan",
         {**msg, "system": "Be brief.", "messages": messages_agent(20)}, KEY),
        ("models", "GET", "/v1/models", None, KEY),
        ("embeddings", "POST", "/v1/embeddings",
         {"model": "text-embedding-3-small", "input": "hi"}, KEY),
    ]  # fmt: skip


# A fixed client name: the recording must not depend on the installed httpx version.
CLIENT = "replay-client/1.0"


def replay(proxy: RunningProxy, upstream: FakeUpstream) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, method, path, body, key in cases():
        upstream.requests.clear()
        headers = {"authorization": f"Bearer {key}"} if key else {}
        if path.startswith("/v1/messages"):
            headers = {"x-api-key": key, "anthropic-version": "2023-06-01"} if key else {}
        headers = {"user-agent": CLIENT, **headers}  # the client's own, forwarded as it came
        r = httpx.request(method, proxy.url + path, headers=headers, timeout=30,
                          content=None if body is None else orjson.dumps(body))  # fmt: skip
        sent = upstream.requests[-1] if upstream.requests else None
        out[name] = {
            "status": r.status_code,
            "headers": [[k, v] for k, v in r.headers.multi_items() if k not in VARYING_HEADERS],
            "body": r.content.decode("utf-8", "replace"),
            "upstream": None if sent is None else {
                "path": sent.path,
                "headers": [[k, v] for k, v in sent.headers.items() if k not in VARYING_HEADERS],
                "body": sent.body.decode("utf-8", "replace"),
            },
        }  # fmt: skip
    rows = usage_rows(proxy, at_least=sum(1 for c in cases() if c[0] not in ("models",)))
    out["usage rows"] = [{k: v for k, v in row.items() if k not in VARYING_ROW} for row in rows]
    return out


def test_the_three_apis_answer_as_recorded(
    start_proxy: Any, policies_dir: Path, fake_upstream_server: tuple[FakeUpstream, str]
) -> None:
    upstream, base = fake_upstream_server
    upstream.reset()
    policies(policies_dir)
    proxy = start_proxy(anthropic_upstream=base)
    got = replay(proxy, upstream)
    if os.environ.get("REPLAY_RECORD"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_bytes(orjson.dumps(got, option=orjson.OPT_INDENT_2) + b"\n")
    expected = orjson.loads(GOLDEN.read_bytes())
    for name in expected:
        assert got.get(name) == expected[name], name
    assert set(got) == set(expected)
