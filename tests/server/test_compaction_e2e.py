"""The providers' own compaction kept safe: an Anthropic `compaction` block and a Responses
`compaction` item are the conversation's summary, forwarded byte for byte, never cut,
dropped or moved, however far over its budget the history around them goes; the
providers' own context management settings and beta headers go upstream as sent; and
OpenAI's `POST /v1/responses/compact` is a planned route (keys, quotas held and charged,
a usage row `api: "compact"`, the body fitted to the window)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson

from proxy.policy.model import hash_key
from tests.fake_upstream import FakeUpstream
from tests.server.test_proxy_e2e import usage_rows

KEY = "cp-compaction-team"
CLAUDE = "claude-sonnet-4-6"
SUMMARY = "Summary so far: the user is migrating invoices; rounding is half-up; 14 files left."
BLOCK = {"type": "compaction", "content": SUMMARY, "signature": "sig-abc", "tool_changes": []}
ITEM = {"type": "compaction", "id": "cmp_1", "encrypted_content": "enc:opaque-" + "x" * 200}


def history(turns: int, words: int = 250) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k in range(turns):
        out.append({"role": "user", "content": f"question {k}: " + "word " * 20})
        out.append({"role": "assistant", "content": f"answer {k}: " + "detail " * words})
    return out


def policy(policies_dir: Path, base: str = "", extra: str = "") -> None:
    anthropic_upstream = f"upstream: {{anthropic: {{base_url: '{base}', api_key_env: T_KEY}}}}\n"
    (policies_dir / "default.yaml").write_text(
        f'team: t\nkeys: ["{hash_key(KEY)}"]\nmetrics: public\n'
        + (anthropic_upstream if base else "")
        + f"models:\n  {CLAUDE}: {{context_window: 8000}}\n  gpt-4o: {{context_window: 8000}}\n"
        + extra
    )


def test_an_anthropic_compaction_block_is_forwarded_as_it_came_however_far_over(
    start_proxy: Any, policies_dir: Path, fake_upstream_server: Any, monkeypatch: Any
) -> None:
    upstream, base = fake_upstream_server
    upstream.reset()
    monkeypatch.setenv("T_KEY", "sk-ant-team")
    policy(policies_dir, base)
    proxy = start_proxy()
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Migrate the invoices."},
        {"role": "assistant", "content": [BLOCK, {"type": "text", "text": "Going on."}]},
        *history(30),
        {"role": "user", "content": "What is left to do?"},
    ]
    sdk = anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0)
    management = {"edits": [{"type": "compact_20260112"}]}
    sdk.beta.messages.create(
        model=CLAUDE, max_tokens=256, messages=messages,  # type: ignore[arg-type]
        context_management=management, betas=["compact-2026-01-12"],  # type: ignore[arg-type]
    )  # fmt: skip
    sent = upstream.messages_requests[-1]
    body = sent.json()
    assert len(sent.body) < len(orjson.dumps(messages)) * 4 // 5  # the history was trimmed
    with_block = [m for m in body["messages"] if isinstance(m["content"], list)
                  and any(b.get("type") == "compaction" for b in m["content"])]  # fmt: skip
    assert len(with_block) == 1 and with_block[0]["role"] == "assistant"
    assert with_block[0]["content"][0] == BLOCK  # the very block, first in its message
    assert orjson.dumps(BLOCK) in sent.body  # byte for byte
    assert body["messages"].index(with_block[0]) <= 2  # where it was: before the history kept
    assert body["context_management"] == management
    assert "compact-2026-01-12" in sent.headers["anthropic-beta"]
    (row,) = [r for r in usage_rows(proxy, at_least=1) if r["api"] == "messages"]
    assert row["tokens_after"] < row["tokens_before"]


def test_a_responses_compaction_item_is_forwarded_as_it_came_however_far_over(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    policy(policies_dir)
    proxy = start_proxy()
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "Migrate the invoices."},
        ITEM,
        *history(30),
        {"role": "user", "content": "What is left to do?"},
    ]
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
    sdk.responses.create(
        model="gpt-4o", input=items,  # type: ignore[arg-type]
        context_management=[{"type": "compaction", "compact_threshold": 6000}],  # type: ignore[arg-type]
        truncation="disabled",
    )  # fmt: skip
    sent = upstream.responses_requests[-1]
    body = sent.json()
    assert len(sent.body) < len(orjson.dumps(items)) * 4 // 5
    assert body["input"][:2] == items[:2]  # the task and the compaction item, in place
    assert orjson.dumps(ITEM) in sent.body
    assert body["context_management"] == [{"type": "compaction", "compact_threshold": 6000}]
    assert body["truncation"] == "disabled"


def test_compact_is_a_planned_route_fitted_held_and_booked(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    policy(policies_dir, extra="quotas: {daily_tokens: 20000, hard_limit: true}\n")
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
    items = [*history(40), {"role": "user", "content": "Compact this, please."}]
    compacted = sdk.responses.compact(model="gpt-4o", input=items)  # type: ignore[arg-type]
    assert compacted.output[-1].type == "compaction"
    sent = [r for r in upstream.requests if r.path == "/v1/responses/compact"][-1]
    assert len(sent.body) < len(orjson.dumps(items)) * 4 // 5  # fitted to the window
    assert sent.headers.get("authorization") != f"Bearer {KEY}"  # the proxy key never leaves
    (row,) = usage_rows(proxy, at_least=1)
    assert (row["api"], row["status"], row["usage_source"]) == ("compact", 200, "upstream")
    assert row["prompt_tokens"] == len(sent.body) // 4 and row["completion_tokens"] == 40
    stranger = httpx.post(
        proxy.url + "/v1/responses/compact", json={"model": "gpt-4o", "input": "x"}
    )
    assert stranger.status_code == 401
    streamed = httpx.post(proxy.url + "/v1/responses/compact", headers={"authorization": f"Bearer {KEY}"},
                          json={"model": "gpt-4o", "input": "x", "stream": True})  # fmt: skip
    assert streamed.status_code == 400 and streamed.json()["error"]["param"] == "stream"
    for _ in range(12):  # the quota spent: refused before anything goes upstream
        last = httpx.post(proxy.url + "/v1/responses/compact", headers={"authorization": f"Bearer {KEY}"},
                          json={"model": "gpt-4o", "input": items}, timeout=30)  # fmt: skip
        if last.status_code == 429:
            break
    assert last.status_code == 429 and last.json()["error"]["code"] == "quota_exceeded"
