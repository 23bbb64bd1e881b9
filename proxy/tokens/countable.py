"""Whether a request's whole cost is in its text: the only requests whose reported prompt
tokens may calibrate an estimate (calibration.py). A document fetched from a URL, a file
by id, an image, or a server tool's results are billed as the provider sees them, which
the proxy does not: such an answer says nothing about how the model counts text.

Read by an allow-list over the three APIs' shapes, so that a block type added later counts
as unknown until it is known."""

from __future__ import annotations

from typing import Any

# Text the proxy counts itself, and the structures around it, in every API's spelling.
_TEXT_TYPES = frozenset(
    {
        "text", "input_text", "output_text", "refusal", "summary_text",
        "thinking", "redacted_thinking", "tool_use", "tool_result",
        "message", "function_call", "function_call_output", "reasoning",
    }
)  # fmt: skip
_PLAIN_TOOLS = frozenset({None, "function", "custom"})
# Top-level fields that bring in what the body does not hold.
_OUTSIDE = ("mcp_servers", "container", "attachments", "file_ids")


def cost_in_text(body: dict[str, Any]) -> bool:
    """True when every part of `body` (a chat, Responses or Messages body) is text the
    proxy counts, and its tools are plain functions."""
    if any(key in body for key in _OUTSIDE):
        return False
    tools = body.get("tools")
    if isinstance(tools, list) and not all(_plain_tool(t) for t in tools):
        return False
    items = body.get("messages")
    if not isinstance(items, list):
        items = body.get("input")
    if not isinstance(items, list):
        return True
    return all(_text_only(item, depth=0) for item in items)


def _text_only(item: object, depth: int) -> bool:
    if not isinstance(item, dict):
        return True  # a plain string, or a shape the readers refused already
    kind = item.get("type")
    if kind is not None and (not isinstance(kind, str) or kind not in _TEXT_TYPES):
        return False
    if depth >= 2:  # a message, a tool result in it, the parts of that result
        return True
    for key in ("content", "output"):
        parts = item.get(key)
        if isinstance(parts, list) and not all(_text_only(p, depth + 1) for p in parts):
            return False
    return True


def _plain_tool(tool: object) -> bool:
    if not isinstance(tool, dict):
        return False
    kind = tool.get("type")
    return kind is None or (isinstance(kind, str) and kind in _PLAIN_TOOLS)
