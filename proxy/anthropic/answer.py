"""Answer step of Anthropic's Messages API: usage in the names the usage row reads, the
generated text (for an estimate when there is no usage), and errors in Anthropic's shape."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.items.read import json_text
from proxy.tokens import CACHE_WRITES, LONG_CACHE_WRITES

# Anthropic's error types by HTTP status (docs.anthropic.com, "Errors").
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    499: "api_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
}
_COUNTS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def anthropic_usage(usage: Any) -> dict[str, Any] | None:
    """Anthropic's usage in the Responses API's names: the prompt is `input_tokens` plus
    the cache reads and writes (Anthropic reports them apart), cached tokens the reads,
    and the writes (those for an hour too) under names of their own."""
    if not isinstance(usage, dict):
        return None
    counts = [usage.get(key) for key in _COUNTS]
    if not all(c is None or type(c) is int for c in counts) or type(counts[0]) is not int:
        return None
    prompt = sum(c for c in counts if c is not None)
    reads = counts[1] if type(counts[1]) is int else 0
    writes = counts[2] if type(counts[2]) is int else 0
    split = usage.get("cache_creation")
    long = split.get("ephemeral_1h_input_tokens") if isinstance(split, dict) else None
    return {
        "input_tokens": prompt,
        "output_tokens": usage.get("output_tokens"),
        "input_tokens_details": {
            "cached_tokens": reads,
            CACHE_WRITES: writes,
            LONG_CACHE_WRITES: long if type(long) is int and long >= 0 else 0,
        },
    }


def message_text(message: dict[str, Any]) -> str:
    """The text and tool inputs a Message generated."""
    parts: list[str] = []
    content = message.get("content")
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        for key in ("text", "thinking"):
            if isinstance(block.get(key), str):
                parts.append(block[key])
        if block.get("type") == "tool_use":
            parts.append(json_text(block.get("input")))  # at any depth an upstream sends
    return "".join(parts)


def error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_json(status: int, message: str) -> bytes:
    """`{"type": "error", "error": {"type", "message"}}`, as Anthropic answers."""
    error = {"type": error_type(status), "message": message}
    return orjson.dumps({"type": "error", "error": error})


def error_event(message: str, type_: str, code: str) -> bytes:
    """A broken stream's last event: Anthropic's `error` event (the SDKs raise it)."""
    kind = "overloaded_error" if code == "server_shutdown" else "api_error"
    data = {"type": "error", "error": {"type": kind, "message": f"{message} ({code})"}}
    return b"event: error\ndata: " + orjson.dumps(data) + b"\n\n"
