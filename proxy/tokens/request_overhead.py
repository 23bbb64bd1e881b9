"""A chat request's overhead beyond its messages, counted as OpenAI renders it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from proxy.tokens.function_schema import json_text, render_functions
from proxy.tokens.tool_kinds import tool_functions
from proxy.types import Body


def request_overhead(body: Body, count: Callable[[str], int], priming: int) -> int:
    """What a request costs beyond its messages: reply priming, tools and functions, a tool
    choice, a response format (the rules in chat.py's docstring)."""
    n = priming  # every reply is primed with <|start|>assistant<|message|>
    # Bodies come from clients: any field may have any JSON type, so shapes are checked.
    functions = tool_functions(body.get("tools"))  # every kind of tool (tool_kinds.py)
    only_legacy = not functions  # only legacy `functions`: nested parts render as they did
    functions += _dicts(body.get("functions"))
    if functions:
        rendered, less = render_functions(functions, only_legacy)
        n += count(rendered) - less + 9
        messages = _dicts(body.get("messages"))
        system = next((m for m in messages if m.get("role") == "system"), None)
        if system is not None:
            n -= 4
            text = system.get("content")
            if isinstance(text, str):  # OpenAI pads that system message with a newline
                n += count(text + "\n") - count(text)
    # A named tool costs 7 + its name; a named legacy function_call 4 + its name.
    legacy = "tool_choice" not in body
    choice = body.get("function_call") if legacy else body.get("tool_choice")
    if choice == "none":
        n += 1
    elif isinstance(choice, dict):
        named = choice.get("function") or choice
        name = named.get("name") if isinstance(named, dict) else None
        n += (4 if legacy else 7) + (count(name) if isinstance(name, str) else 0)
    response_format = body.get("response_format")
    schema = response_format.get("json_schema") if isinstance(response_format, dict) else None
    if isinstance(schema, dict):
        try:
            rendered = orjson.dumps(schema.get("schema")).decode()
        except orjson.JSONEncodeError:  # nested past orjson's limit: our own, any depth
            rendered = json_text(schema.get("schema"))
        n += 8 + count(str(schema.get("name", ""))) + count(rendered)
    return n


def overhead_inputs(body: Body, fields: Iterable[str]) -> bytes | None:
    """All request_overhead reads of `body`, serialized: its `fields` (those beside the
    messages) and the first system message, there or not, with its text. A key for its
    count (a client resends the same tools with every request); None when they do not
    serialize (counted each time)."""
    extras = {k: body[k] for k in fields if k in body}
    messages = body.get("messages")
    first = None
    if isinstance(messages, list):
        first = next(
            (m for m in messages if isinstance(m, dict) and m.get("role") == "system"), None
        )
    system = (first.get("content"),) if first is not None else None
    try:
        return orjson.dumps((extras, system))
    except (TypeError, orjson.JSONEncodeError):
        return None


def _dicts(value: object) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
