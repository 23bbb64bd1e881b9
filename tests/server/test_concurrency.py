"""Hundreds of concurrent requests, plain and streamed, trimmed and not: every answer, every row."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.fake_upstream import FakeUpstream
from tests.fault_upstream import usage_rows

KINDS = ("plain", "plain_trimmed", "stream", "stream_trimmed", "upstream_429")
PER_KIND = 60  # 300 requests in all, all in flight at once
FILLER = " ".join(f"word{i}" for i in range(250))  # ~500 tokens per message


def body_for(kind: str, index: int) -> dict[str, Any]:
    marker = f"marker-{index}"
    if kind.endswith("trimmed"):
        history: list[dict[str, str]] = []
        for turn in range(10):  # ~5000 tokens against a 2000-token window
            history.append(
                {"role": "user" if turn % 2 == 0 else "assistant", "content": f"{turn} {FILLER}"}
            )
        messages = [*history, {"role": "user", "content": f"Question {marker}?"}]
    else:
        messages = [{"role": "user", "content": f"Question {marker}?"}]
    return {"model": "gpt-4o", "messages": messages, "stream": kind.startswith("stream")}


async def one(client: httpx.AsyncClient, url: str, kind: str, index: int) -> dict[str, Any]:
    headers = {"x-fake-mode": "error"} if kind == "upstream_429" else {}
    async with client.stream(
        "POST", url + "/v1/chat/completions", json=body_for(kind, index), headers=headers
    ) as r:
        raw = await r.aread()
    return {"kind": kind, "index": index, "status": r.status_code, "headers": r.headers, "raw": raw}


def stream_text(raw: bytes) -> str:
    assert raw.endswith(b"data: [DONE]\n\n")
    text = ""
    for event in raw.split(b"\n\n"):
        if event.startswith(b"data: {"):
            chunk = orjson.loads(event[6:])
            assert "error" not in chunk
            text += "".join(c["delta"].get("content") or "" for c in chunk["choices"])
    return text


async def test_hundreds_of_concurrent_requests(
    start_proxy: Any, policies_dir: Path, upstream: FakeUpstream
) -> None:
    (policies_dir / "default.yaml").write_text("models: {gpt-4o: {context_window: 2000}}\n")
    proxy = start_proxy()
    upstream.status = 429
    jobs = [(kind, i * len(KINDS) + k) for i in range(PER_KIND) for k, kind in enumerate(KINDS)]
    limits = httpx.Limits(max_connections=len(jobs), max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        results = await asyncio.gather(*(one(client, proxy.url, kind, i) for kind, i in jobs))

    by_id: dict[str, dict[str, Any]] = {}
    for res in results:
        kind, headers = res["kind"], res["headers"]
        trimmed = int(headers["x-context-trimmed"])
        assert (trimmed > 0) == kind.endswith("trimmed"), (kind, trimmed)
        if kind == "upstream_429":
            assert res["status"] == 429 and res["raw"] == upstream.error_body
        elif kind.startswith("stream"):
            assert res["status"] == 200 and stream_text(res["raw"]) == upstream.reply_text
        else:
            assert res["status"] == 200
            assert (
                orjson.loads(res["raw"])["choices"][0]["message"]["content"] == upstream.reply_text
            )
        by_id[headers["x-request-id"]] = res
    assert len(by_id) == len(jobs)

    # The upstream saw each request once, trimmed ones with fewer messages.
    seen: Counter[str] = Counter()
    for rec in upstream.chat_requests:
        body = rec.json()
        last = body["messages"][-1]["content"]
        seen[last] += 1
        if len(body["messages"]) > 1:
            assert len(body["messages"]) < 11
    assert sorted(seen.values()) == [1] * len(jobs)

    rows = [r for r in usage_rows(proxy.usage_path, len(jobs)) if r["kind"] == "chat"]
    assert len(rows) == len(jobs)
    assert Counter(r["request_id"] for r in rows) == Counter(list(by_id))
    for row in rows:
        res = by_id[row["request_id"]]
        kind = res["kind"]
        assert row["status"] == res["status"]
        assert row["stream"] == kind.startswith("stream")
        assert row["error"] == ("upstream_429" if kind == "upstream_429" else None)
        assert (row["tokens_after"] < row["tokens_before"]) == kind.endswith("trimmed")
        if kind != "upstream_429":
            assert row["usage_source"] == "upstream"
