"""The fake upstream's Responses API: answers, typed SSE events, and OpenAI's pairing check."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator
from typing import Any

import orjson

RECALL_TOOL = "context_recall"  # the proxy's own tool


def pairing_problem(body: dict[str, Any]) -> str | None:
    """OpenAI's 400 for a function_call without its output, or an output without its call
    (unless the call may be in the previous response)."""
    items = body.get("input")
    if not isinstance(items, list):
        return None
    calls = [i.get("call_id") for i in items if i.get("type") == "function_call"]
    outputs = [i.get("call_id") for i in items if i.get("type") == "function_call_output"]
    for call_id in calls:
        if call_id not in outputs:
            return f"No tool output found for function call {call_id}."
    if not body.get("previous_response_id"):
        for call_id in outputs:
            if call_id not in calls:
                return f"No tool call found for function call output with call_id {call_id}."
    return None


def _recall(item: Any) -> bool:
    """The proxy's quoted recall: context the model reads, not a new request to answer."""
    if not isinstance(item, dict) or item.get("role") != "user":
        return False
    content = item.get("content")
    if isinstance(content, list) and content and isinstance(content[0], dict):
        content = content[0].get("text")
    text = content if isinstance(content, str) else ""
    return "[context-proxy:" in text[:80] and "recalled" in text[:120]


def _before_recall_round(items: list[Any]) -> list[Any]:
    """The input as it stood before the proxy's own round (the model's words, its call of
    the recall tool and the tool's answer): the model reads on from there."""
    calls = [
        n
        for n, item in enumerate(items)
        if isinstance(item, dict) and str(item.get("call_id", "")).startswith("call_recall")
    ]
    if not calls or calls[-1] != len(items) - 1:
        return items
    start = calls[0]
    while start > 0 and items[start - 1].get("type") == "message":
        start -= 1  # the words the model said before its call, in the same round
    return items[:start]


def response(
    body: dict[str, Any],
    text: str,
    size: int,
    arguments: str,
    steps: int = 0,
    read: int | None = None,
) -> dict[str, Any]:
    """A completed Response: a call of the first function tool when the input ends with a
    user message, else a message saying `text` (and the last tool output, if any). With
    `steps`, a tool loop: a call for each step after the one the newest output names
    ("step N"), then "Done after N steps." (fake_agent_model.py does it for chat)."""
    items = body.get("input")
    items = _before_recall_round(items) if isinstance(items, list) else items
    said_last = [i for i in items if not _recall(i)] if isinstance(items, list) else []
    last = said_last[-1] if said_last else {"role": "user"}
    given = body.get("tools")
    listed = given if isinstance(given, list) else []  # a real upstream would say 400
    # The proxy's own recall tool is called only by the fake that plays a model using it
    # (fake_recall.py): this one works with the client's tools.
    tools = [
        t
        for t in listed
        if isinstance(t, dict) and t.get("type") == "function" and t.get("name") != RECALL_TOOL
    ]
    output: list[dict[str, Any]]
    done = 0
    if steps and last.get("type") in ("function_call_output", "compaction"):
        said = (
            last.get("output")
            if last.get("type") == "function_call_output"
            else last.get("encrypted_content")
        )
        found = re.search(r"\bstep (\d+)\b", str(said))  # a summary says where the loop was
        done = int(found.group(1)) if found else steps
    if steps and tools and done < steps:
        arguments = step_arguments(tools[0], done + 1)
        size = done + 1  # the call's id: one per step
    if steps and done >= steps:
        text, last = f"Done after {done} steps.", {"role": "user"}
        tools = []
    if tools and (last.get("role") == "user" or (steps and done < steps)):
        output = [
            {
                "type": "function_call",
                "id": "fc_fake",
                "call_id": f"call_fake_{size}",
                "name": tools[0]["name"],
                "arguments": arguments,
                "status": "completed",
            }
        ]
    else:
        said = text
        if last.get("type") == "function_call_output":
            said = f"{text} Tool said: {last.get('output')}"
        output = [
            {
                "type": "message",
                "id": "msg_fake",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": said, "annotations": []}],
            }
        ]
    words = len(text.split())
    size = size if read is None else read  # what a compacting server reads: its tokens
    # input tokens from the request's size: a figure only the fake knows, so a usage row
    # that shows it read it from the answer
    usage = {
        "input_tokens": size // 4 + 3,
        "input_tokens_details": {"cached_tokens": 2},
        "output_tokens": words,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": size // 4 + 3 + words,
    }
    return {
        "id": "resp_fake",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": body.get("model"),
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "temperature": 1.0,
        "top_p": 1.0,
        "text": {"format": {"type": "text"}},
        "usage": usage,
    }


def step_arguments(tool: dict[str, Any], step: int) -> str:
    """A step's call as its tool's schema asks: a shell command for a tool taking `cmd`
    (the Codex CLI's `exec_command`) that prints the step and reads a long file, else
    `{"step": N, "part": "a"}`."""
    properties = (tool.get("parameters") or {}).get("properties") or {}
    if "cmd" in properties:
        return orjson.dumps({"cmd": f"echo step {step} && cat notes.txt"}).decode()
    return orjson.dumps({"step": step, "part": "a"}).decode()


def since_compaction(body: dict[str, Any]) -> int:
    """Bytes of the conversation a compacting server reads in full: the items after the
    last compaction item (the setup and the summary are counted apart, here not at all)."""
    items = body.get("input") if isinstance(body.get("input"), list) else []
    last = max((i for i, item in enumerate(items)
                if isinstance(item, dict) and item.get("type") == "compaction"), default=-1)  # fmt: skip
    kept = [
        it for it in items[last + 1 :] if isinstance(it, dict) and it.get("role") != "developer"
    ]
    return len(orjson.dumps(kept))


def compaction_asked(body: dict[str, Any]) -> bool:
    """Whether the input ends with a `compaction_trigger` item: Codex's request that the
    server compact the conversation (its remote compaction v2)."""
    items = body.get("input")
    last = items[-1] if isinstance(items, list) and items else None
    return isinstance(last, dict) and last.get("type") == "compaction_trigger"


def compaction_item(raw: bytes) -> dict[str, Any]:
    """The one `compaction` output item of a compaction: opaque, a digest of its input and
    the newest step its tool outputs name (so that an agent loop goes on from there)."""
    digest = hashlib.sha256(raw).hexdigest()[:16]
    steps = re.findall(rb"\bstep (\d+)\b", raw)
    where = f"; step {int(steps[-1])}" if steps else ""
    return {
        "type": "compaction",
        "id": f"cmp_{digest}",
        "encrypted_content": f"enc:{digest}{where}",
    }


async def events(
    answer: dict[str, Any], broken: bool, cut_short: bool = False
) -> AsyncIterator[bytes]:
    """The typed events of a streamed Response; `broken` ends it after two deltas with a
    reset connection, `cut_short` cleanly (no response.completed)."""
    seq = 0

    def event(kind: str, **data: Any) -> bytes:
        nonlocal seq
        seq += 1
        return (
            f"event: {kind}\ndata: ".encode()
            + orjson.dumps({"type": kind, "sequence_number": seq - 1, **data})
            + b"\n\n"
        )

    started = {**answer, "status": "in_progress", "output": [], "usage": None}
    yield event("response.created", response=started)
    yield event("response.in_progress", response=started)
    for index, item in enumerate(answer["output"]):
        if item["type"] != "message":
            yield event("response.output_item.added", output_index=index, item=item)
            yield event("response.output_item.done", output_index=index, item=item)
            continue
        text = item["content"][0]["text"]
        empty = {**item, "status": "in_progress", "content": []}
        yield event("response.output_item.added", output_index=index, item=empty)
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        yield event("response.content_part.added", part=part, **where)
        for i, word in enumerate(text.split(" ")):
            yield event(
                "response.output_text.delta", delta=(" " if i else "") + word, logprobs=[], **where
            )
            await asyncio.sleep(0.002)
            if broken and i == 1:
                raise ConnectionResetError("fake upstream breaks mid-stream")
            if cut_short and i == 1:
                return
        yield event("response.output_text.done", text=text, logprobs=[], **where)
        yield event("response.content_part.done", part=item["content"][0], **where)
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed", response=answer)
