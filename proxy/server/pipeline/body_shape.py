"""Shape step: what in a chat body is not the shape OpenAI's API accepts, named by its
parameter, so a planning failure caused by the body is the client's 400, not a 500."""

from __future__ import annotations

from typing import Any

_CONTENT_PART_TEXT = ("text", "input_text", "refusal")


def shape_problem(body: dict[str, Any]) -> tuple[str, str] | None:
    """(message, param) for the first part of `body` that is not a valid chat shape."""
    for index, message in enumerate(body.get("messages") or ()):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            return "must be an object", where
        problem = _message_problem(message)
        if problem is not None:
            return problem[0], f"{where}{problem[1]}"
    for key in ("tools", "functions"):
        tools = body.get(key)
        if tools is not None and (
            not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)
        ):
            return "must be an array of objects", key
    return None


def _message_problem(message: dict[str, Any]) -> tuple[str, str] | None:
    content = message.get("content")
    if isinstance(content, list):
        for i, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type", ""), str):
                return "must be an object with a string 'type'", f".content[{i}]"
            if part.get("type") in _CONTENT_PART_TEXT and not isinstance(part.get("text"), str):
                return "must have a string 'text'", f".content[{i}]"
    elif content is not None and not isinstance(content, str):
        return "'content' must be a string, an array of parts or null", ".content"
    for key in ("name", "tool_call_id"):
        if key in message and message[key] is not None and not isinstance(message[key], str):
            return f"'{key}' must be a string", f".{key}"
    calls = message.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            return "'tool_calls' must be an array", ".tool_calls"
        for i, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                return "must be an object with a 'function' naming it", f".tool_calls[{i}]"
            if not isinstance(function.get("arguments", ""), str):
                return "'arguments' must be a string", f".tool_calls[{i}].function"
    x_context = message.get("x_context")
    if x_context is not None and not isinstance(x_context, dict):
        return "'x_context' must be an object", ".x_context"
    return None
