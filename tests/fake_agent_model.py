"""A fake model that runs a tool loop (chat completions): while the step its last tool
result names is below `steps`, it answers with two parallel calls of the request's first
tool (plain or streamed, as OpenAI sends them); then with a final answer. The step is read
from the newest tool result ("step N ..."), so that the loop goes on however the proxy
trimmed the history before it."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import orjson

RECALL_TOOL = "context_recall"  # the proxy's own tool

_STEP = re.compile(r"\bstep (\d+)\b")


def next_message(body: dict[str, Any], steps: int) -> dict[str, Any]:
    """The assistant message the script answers `body` with."""
    messages = body.get("messages") or []
    tools = [  # the client's: the proxy's own recall tool is fake_recall.py's to call
        t for t in body.get("tools") or [] if (t.get("function") or {}).get("name") != RECALL_TOOL
    ]
    # the proxy's quoted recall is context the model reads, not a new request to answer
    said = [
        m
        for m in messages
        if "recalled from earlier" not in _text(m.get("content"))[:120]
        and not str(m.get("tool_call_id", "")).startswith("call_recall")
        and not any(
            str(c.get("id", "")).startswith("call_recall") for c in m.get("tool_calls") or ()
        )
    ]
    last = said[-1] if said else {}
    done = 0
    if last.get("role") == "tool":
        found = _STEP.search(str(last.get("content")))
        done = int(found.group(1)) if found else steps
    name = (tools[0].get("function") or {}).get("name") if tools else None
    if not name or done >= steps:
        return {"role": "assistant", "content": f"Done after {done} steps."}
    step = done + 1
    calls = [
        {"id": f"call_{step}_{side}", "type": "function",
         "function": {"name": name, "arguments": orjson.dumps({"step": step, "part": side}).decode()}}
        for side in ("a", "b")
    ]  # fmt: skip
    return {"role": "assistant", "content": None, "tool_calls": calls}


def _text(content: object) -> str:
    return content if isinstance(content, str) else ""


def completion(body: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-agent", "object": "chat.completion", "created": 1,
        "model": body.get("model"),
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }  # fmt: skip


async def chunks(body: dict[str, Any], message: dict[str, Any]) -> AsyncIterator[bytes]:
    """`message` as a stream of chunks: each call in a delta of its own, then the finish
    reason, the usage chunk when asked for, and [DONE]."""
    base = {"id": "chatcmpl-agent", "object": "chat.completion.chunk", "created": 1,
            "model": body.get("model")}  # fmt: skip

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        data = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + orjson.dumps(data) + b"\n\n"

    calls = message.get("tool_calls")
    if calls:
        for index, call in enumerate(calls):
            yield chunk({"role": "assistant", "tool_calls": [{"index": index, **call}]})
        yield chunk({}, "tool_calls")
    else:
        yield chunk({"role": "assistant", "content": message["content"]})
        yield chunk({}, "stop")
    if (body.get("stream_options") or {}).get("include_usage") is True:
        usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        yield b"data: " + orjson.dumps({**base, "choices": [], "usage": usage}) + b"\n\n"
    yield b"data: [DONE]\n\n"
