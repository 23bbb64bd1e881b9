"""A fake model that uses the proxy's `context_recall` tool (chat, Responses, Messages).

When the request declares the tool and its newest part is not the tool's answer, it says a
few words and calls the tool with the first recall id it finds in the request's markers
and the newest question as its query ("recall"); with the client's first tool called
beside it ("recall_mixed"); or calls it whatever it got back ("recall_forever"); or calls it
STORM times in one answer, each call with a query of its own that matches no word of the
conversation (each scored in full; none fills the window) ("recall_storm"; whatever it
got back: "recall_storm_forever"), its usage sized by the request and its answer (a token
per 4 bytes); or says
the same words with the same pauses whether the tool is declared or not, calling it only
where it is ("recall_or_text": a stream's time to first token, with the tool and
without); in an agent's loop, before each step ("agent_recall"). Given the tool's answer, it
answers `RECALLED: ` and the answer's text (so a test reads what the model got), plain or
streamed with a pause before its first words (time to first token).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

TOOL = "context_recall"
IDS = re.compile(r"recall ([trm][0-9a-f]{6})\b")
BEFORE_CALL = "Let me look back at that."
FIRST_TOKEN_DELAY_S = 0.05  # before its first words (a stream's time to first token)
STORM = 200  # calls in one answer of "recall_storm"
STORM_WORDS = ("weather", "garden", "vault", "river", "budget", "train", "music")
STORM_ANSWER_TOKENS = 50


def sized(raw_size: int, answer: dict[str, Any], limit: Any = None) -> dict[str, int]:
    """A usage object sized by the request and the answer: a token per 4 bytes of each
    (the answer's message, its calls included), at least STORM_ANSWER_TOKENS out, and no
    more than the request's answer limit (as a model is cut there)."""
    prompt = raw_size // 4
    said = len(orjson.dumps(answer["choices"][0]["message"])) // 4
    completion = max(STORM_ANSWER_TOKENS, said)
    if type(limit) is int and limit > 0:
        completion = min(completion, limit)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}  # fmt: skip


def declared(body: dict[str, Any]) -> bool:
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else tool.get("name")
        if name == TOOL:
            return True
    return False


def recalls(body: dict[str, Any], api: str, mode: str) -> bool:
    """Whether this request is answered by this model: "recall" modes whenever the tool is
    declared; "agent_recall" (an agent's loop that asks for the past once per step) only
    while the tool's answer is not the request's newest part."""
    if mode == "recall_or_text":  # the same words and pauses, a call only where it can
        return True
    if not declared(body):
        return False
    if mode == "agent_recall":
        return _recalled(body, api) is None
    return mode.startswith("recall")


def _client_tool(body: dict[str, Any]) -> str | None:
    for tool in body.get("tools") or ():
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else tool.get("name")
        if name != TOOL:
            return str(name)
    return None


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(
            _text(v.get("text") or v.get("content") or "") for v in value if isinstance(v, dict)
        )
    return ""


def plan(
    body: dict[str, Any], api: str, mode: str
) -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
    """What to say and which tools to call: (text, [(call id, tool name, arguments)])."""
    raw = orjson.dumps(body).decode()
    recalled = _recalled(body, api)
    if recalled is not None and mode not in ("recall_forever", "recall_storm_forever"):
        return "RECALLED: " + recalled, []
    if not declared(body):
        return BEFORE_CALL + " It was about the weather.", []
    ids = IDS.findall(raw)
    question = _question(body, api)
    args: dict[str, Any] = {"query": question}
    if ids:
        args["ids"] = ids[:1]
    calls = [("call_recall_" + str(raw.count(TOOL)), TOOL, args)]
    if mode.startswith("recall_storm"):  # many calls in one answer, each its own query
        n = raw.count(TOOL)
        calls = [(f"call_recall_{n}_{k}", TOOL, {"query": f"{STORM_WORDS[k % 7]}{k}"})
                 for k in range(STORM)]  # fmt: skip
        return "", calls  # nothing said: only the calls
    client = _client_tool(body)
    if mode == "recall_mixed" and client is not None:
        calls.append(("call_client_1", client, {"city": "Paris"}))
    return BEFORE_CALL, calls


def _question(body: dict[str, Any], api: str) -> str:
    items = body.get("input") if api == "responses" else body.get("messages")
    if isinstance(items, str):
        return items
    for item in reversed(items or []):
        if isinstance(item, dict) and item.get("role") == "user":
            text = _text(item.get("content"))
            if text and "tool_result" not in orjson.dumps(item).decode():
                return text[-300:]
    return ""


def continuation(body: dict[str, Any], api: str) -> bool:
    """Whether the request continues an answer with the tool's answer (the proxy's round)."""
    return _recalled(body, api) is not None


def _recalled(body: dict[str, Any], api: str) -> str | None:
    """The tool's answer, when it is the request's newest part."""
    if api == "chat":
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        if last.get("role") == "tool" and str(last.get("tool_call_id", "")).startswith(
            "call_recall"
        ):
            return _text(last.get("content"))
    elif api == "responses":
        items = body.get("input") if isinstance(body.get("input"), list) else []
        last = items[-1] if items else {}
        if last.get("type") == "function_call_output" and str(last.get("call_id", "")).startswith(
            "call_recall"
        ):
            return _text(last.get("output"))
    else:
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        for block in last.get("content") if isinstance(last.get("content"), list) else ():
            if block.get("type") == "tool_result" and str(block.get("tool_use_id")).startswith(
                "call_recall"
            ):
                return _text(block.get("content"))
    return None


USAGE = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}


def chat_answer(body: dict[str, Any], mode: str) -> dict[str, Any]:
    text, calls = plan(body, "chat", mode)
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {
                "id": i,
                "type": "function",
                "function": {"name": n, "arguments": orjson.dumps(a).decode()},
            }
            for i, n, a in calls
        ]
    finish = "tool_calls" if calls else "stop"
    return {"id": f"chatcmpl-{len(body.get('messages') or [])}", "object": "chat.completion",
            "created": 1, "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": dict(USAGE)}  # fmt: skip


async def chat_chunks(
    body: dict[str, Any],
    answer: dict[str, Any],
    text_read: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[bytes]:
    """The answer as a stream; with `text_read`, its calls wait for it (the client's word
    that it has read the text before them)."""
    base = {k: answer[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    usage = (body.get("stream_options") or {}).get("include_usage") is True

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        data = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if usage:
            data["usage"] = None
        return b"data: " + orjson.dumps(data) + b"\n\n"

    message = answer["choices"][0]["message"]
    await asyncio.sleep(FIRST_TOKEN_DELAY_S)
    yield chunk({"role": "assistant", "content": ""})
    for i, word in enumerate(str(message.get("content") or "").split(" ")):
        yield chunk({"content": (" " if i else "") + word})
    if text_read is not None and message.get("tool_calls"):
        await text_read()
    for index, call in enumerate(message.get("tool_calls") or ()):
        head = {"index": index, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""}}  # fmt: skip
        yield chunk({"tool_calls": [head]})
        args = call["function"]["arguments"]
        for part in (args[: len(args) // 2], args[len(args) // 2 :]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
        if index == 0:  # a long call: what comes before it must not wait for it
            await asyncio.sleep(0.2)
    yield chunk({}, answer["choices"][0]["finish_reason"])
    if usage:
        yield b"data: " + orjson.dumps({**base, "choices": [], "usage": answer["usage"]}) + b"\n\n"
    yield b"data: [DONE]\n\n"


def responses_answer(body: dict[str, Any], mode: str) -> dict[str, Any]:
    text, calls = plan(body, "responses", mode)
    given = body.get("input")
    n = len(given) if isinstance(given, list) else 1
    output: list[dict[str, Any]] = [{
        "type": "message", "id": f"msg_{n}", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }]  # fmt: skip
    output += [
        {"type": "function_call", "id": f"fc_{i}", "call_id": i, "name": name,
         "arguments": orjson.dumps(a).decode(), "status": "completed"}
        for i, name, a in calls
    ]  # fmt: skip
    return {"id": f"resp_{n}", "object": "response", "created_at": 1, "status": "completed",
            "model": body.get("model"), "output": output,
            "usage": {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}  # fmt: skip


def messages_answer(body: dict[str, Any], mode: str) -> dict[str, Any]:
    text, calls = plan(body, "messages", mode)
    n = len(body.get("messages") or [])
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    content += [{"type": "tool_use", "id": i, "name": name, "input": a} for i, name, a in calls]
    return {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": body.get("model"),
            "content": content, "stop_reason": "tool_use" if calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 10,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}  # fmt: skip
