"""The fake upstream's Anthropic Messages API: the API's own checks, strictly (first
message a user one, roles alternating, every `tool_result` answering a `tool_use` of the
message before it, at most four cache points, with thinking on the assistant message a
tool result answers starting with its thinking), a model that
runs a tool loop (a `tool_use` of the first tool per step, the step read from the newest
result, as fake_agent_model.py does for chat), and the typed events of a stream."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator
from typing import Any

import orjson

RECALL_TOOL = "context_recall"  # the proxy's own tool

_STEP = re.compile(r"\bstep (\d+)\b")


def problem(body: dict[str, Any]) -> str | None:
    """Anthropic's 400 for a body its rules refuse, or None."""
    messages = body.get("messages") or []
    if not messages or messages[0].get("role") != "user":
        return "messages: the first message must use the user role"
    points = _cache_points(body)
    if points > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {points}."
    for n in range(1, len(messages)):
        if messages[n].get("role") == messages[n - 1].get("role"):
            return f"messages.{n}: roles must alternate between `user` and `assistant`"
    thinking = (body.get("thinking") or {}).get("type") == "enabled"
    last = messages[-1].get("content")
    if thinking and isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
        final = messages[-2].get("content") if len(messages) > 1 else None
        first = final[0].get("type") if isinstance(final, list) and final else None
        if first not in ("thinking", "redacted_thinking"):
            return (f"messages.{len(messages) - 2}.content.0.type: Expected `thinking` or "
                    f"`redacted_thinking`, but found `{first}`")  # fmt: skip
    previous_uses: set[str] = set()
    for n, message in enumerate(messages):
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        if message.get("role") == "user":
            for block in blocks:
                if (
                    block.get("type") == "tool_result"
                    and block.get("tool_use_id") not in previous_uses
                ):
                    return f"messages.{n}: unexpected `tool_use_id` found in `tool_result` blocks"
        uses = {b["id"] for b in blocks if b.get("type") == "tool_use"}
        if uses:
            following = messages[n + 1] if n + 1 < len(messages) else None
            answered = {b.get("tool_use_id") for b in (following or {}).get("content") or []
                        if isinstance(b, dict) and b.get("type") == "tool_result"}  # fmt: skip
            if following is not None and not uses <= answered:
                return f"messages.{n}: `tool_use` ids were found without `tool_result` blocks"
        previous_uses = uses
    return None


def _cache_points(body: dict[str, Any]) -> int:
    blocks = [*(body.get("tools") or [])]
    if isinstance(body.get("system"), list):
        blocks += body["system"]
    for message in body.get("messages") or []:
        if isinstance(message.get("content"), list):
            blocks += message["content"]
    return sum(isinstance(b, dict) and "cache_control" in b for b in blocks)


FETCHED_DOCUMENT_TOKENS = 60_000  # what a PDF behind a URL is billed as


def fetched_tokens(body: dict[str, Any]) -> int:
    """What Anthropic bills for the documents it fetches itself (a `url` source): the
    fetched file's tokens, which the body does not hold."""
    n = 0
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            source = block.get("source") if isinstance(block, dict) else None
            if block.get("type") == "document" and isinstance(source, dict):
                n += FETCHED_DOCUMENT_TOKENS if source.get("type") == "url" else 0
    return n


def reply(body: dict[str, Any], steps: int, text: str) -> dict[str, Any]:
    """A Message: with `steps` and tools, a `tool_use` per step until the newest result
    names the last step; then `Done after N steps.`; without, `text`."""
    messages = body.get("messages") or []
    tools = [
        t
        for t in body.get("tools") or ()
        if isinstance(t, dict) and "name" in t and t["name"] != RECALL_TOOL
    ]
    done = 0
    if messages and "call_recall" in orjson.dumps(messages[-1].get("content")).decode():
        messages = messages[:-2]  # the proxy's own round: the model reads on before it
    last = messages[-1].get("content") if messages else None
    results = [b for b in last if b.get("type") == "tool_result"] if isinstance(last, list) else []
    if results:
        found = _STEP.search(orjson.dumps(results[-1].get("content")).decode())
        done = int(found.group(1)) if found else steps
    content: list[dict[str, Any]]
    if steps and tools and done < steps:
        step = done + 1
        tool, given = _tool_and_input(tools, step)
        content = [
            {"type": "thinking", "thinking": f"Step {step} next.", "signature": f"sig{step}"},
            {
                "type": "tool_use",
                "id": f"toolu_{len(messages)}_{step}",
                "name": tool,
                "input": given,
            },
        ]
        stop = "tool_use"
    else:
        said = f"Done after {done} steps." if steps else text
        content, stop = [{"type": "text", "text": said}], "end_turn"
    size = len(orjson.dumps(body))
    usage = {"input_tokens": size // 8, "cache_creation_input_tokens": 5,
             "cache_read_input_tokens": size // 8, "output_tokens": 9}  # fmt: skip
    return {"id": f"msg_{len(messages)}_{done}", "type": "message", "role": "assistant", "model": body.get("model"),
            "content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage}  # fmt: skip


class PromptCache:
    """Anthropic's prompt cache, as its docs tell it: a request writes the prefix up to
    each of its `cache_control` points (1,024 tokens at least) and reads the longest prefix
    an earlier request wrote whose end is within 20 blocks before one of its points; the
    rest is plain input. Blocks are counted at a token per four bytes of their JSON, and
    compared without their cache points."""

    MIN, LOOKBACK = 1024, 20

    def __init__(self) -> None:
        self.written: set[bytes] = set()

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        blocks: list[Any] = list(body.get("tools") or [])
        system = body.get("system")
        blocks += system if isinstance(system, list) else ([{"type": "text", "text": system}]
                                                           if system else [])  # fmt: skip
        for message in body.get("messages") or []:
            content = message.get("content")
            blocks += content if isinstance(content, list) else [{"type": "text", "text": content}]
        keys, sizes, chain = [], [], b""
        for block in blocks:
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            data = orjson.dumps(plain, option=orjson.OPT_SORT_KEYS)
            chain = hashlib.blake2b(chain + data, digest_size=16).digest()
            keys.append(chain)
            sizes.append(max(1, len(data) // 4))
        upto = [sum(sizes[: n + 1]) for n in range(len(sizes))]
        points = [n for n, b in enumerate(blocks) if isinstance(b, dict) and b.get("cache_control")]
        read = 0
        for point in points:
            for n in range(point, max(point - self.LOOKBACK, -1), -1):
                if keys[n] in self.written and upto[n] >= self.MIN:
                    read = max(read, upto[n])
                    break
        last = upto[points[-1]] if points else 0
        written = last - read if last >= self.MIN and last > read else 0
        for point in points:
            if upto[point] >= self.MIN:
                self.written.add(keys[point])
        total = upto[-1] if upto else 0
        return {"input_tokens": total - read - written, "cache_read_input_tokens": read,
                "cache_creation_input_tokens": written, "output_tokens": 9}  # fmt: skip


def _tool_and_input(tools: list[dict[str, Any]], step: int) -> tuple[str, dict[str, Any]]:
    """A step's call, as a model reads the tools: a shell tool taking `command` (Claude
    Code's Bash) prints the step and reads a long file; else the first tool, `{"step": N}`."""
    for tool in tools:
        properties = (tool.get("input_schema") or {}).get("properties") or {}
        if "command" in properties:
            return tool["name"], {"command": f"echo step {step} && cat notes.txt",
                                  "description": f"Read the notes (step {step})"}  # fmt: skip
    return tools[0]["name"], {"step": step}


async def events(message: dict[str, Any], broken: bool = False) -> AsyncIterator[bytes]:
    """`message` as Anthropic streams it: message_start (the prompt's usage), a start, deltas
    and a stop per block, a ping, message_delta (stop reason, output tokens), message_stop."""

    def event(kind: str, **data: Any) -> bytes:
        return f"event: {kind}\ndata: ".encode() + orjson.dumps({"type": kind, **data}) + b"\n\n"

    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield event("message_start", message=start)
    yield event("ping")
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        if kind == "text":
            yield event(
                "content_block_start", index=index, content_block={"type": "text", "text": ""}
            )
            for i, word in enumerate(block["text"].split(" ")):
                delta = {"type": "text_delta", "text": (" " if i else "") + word}
                yield event("content_block_delta", index=index, delta=delta)
                await asyncio.sleep(0.001)
                if broken and i == 1:
                    raise ConnectionResetError("fake upstream breaks mid-stream")
        elif kind == "thinking":
            empty = {"type": "thinking", "thinking": "", "signature": ""}
            yield event("content_block_start", index=index, content_block=empty)
            delta = {"type": "thinking_delta", "thinking": block["thinking"]}
            yield event("content_block_delta", index=index, delta=delta)
            signature = {"type": "signature_delta", "signature": block["signature"]}
            yield event("content_block_delta", index=index, delta=signature)
        else:
            yield event("content_block_start", index=index, content_block={**block, "input": {}})
            delta = {
                "type": "input_json_delta",
                "partial_json": orjson.dumps(block["input"]).decode(),
            }
            yield event("content_block_delta", index=index, delta=delta)
        yield event("content_block_stop", index=index)
    final = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield event("message_delta", delta=final, usage={"output_tokens": usage["output_tokens"]})
    yield event("message_stop")
