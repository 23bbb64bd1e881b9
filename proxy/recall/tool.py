"""The recall tool: its declaration in each API's shape (fixed bytes), and when it may go.

The proxy declares `context_recall` in a request it trimmed, after the client's own tools
(so the client's part of the prompt keeps its bytes), never when the client declares a
tool of that name itself or a `tool_choice` that would exclude it (none, a named tool, a
list of allowed tools without it).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

TOOL_NAME = "context_recall"
DESCRIPTION = (
    "Fetch parts of this conversation that were left out to fit the model's context window. "
    "Each part left out is marked in the conversation as [context-proxy: …, recall ID]: "
    "pass those ids, or a query naming what you need from the earlier conversation. Call it "
    "only when the answer needs something that was left out."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ids": {
            "type": "array",
            "items": {"type": "string"},
            "description": "recall ids from the [context-proxy: …] markers",
        },
        "query": {
            "type": "string",
            "description": "what to look for in the parts left out",
        },
    },
    "additionalProperties": False,
}
CHAT = MappingProxyType(
    {
        "type": "function",
        "function": {"name": TOOL_NAME, "description": DESCRIPTION, "parameters": PARAMETERS},
    }
)
RESPONSES = MappingProxyType(
    {"type": "function", "name": TOOL_NAME, "description": DESCRIPTION, "parameters": PARAMETERS}
)
MESSAGES = MappingProxyType(
    {"name": TOOL_NAME, "description": DESCRIPTION, "input_schema": PARAMETERS}
)
DECLARATIONS = {"chat": CHAT, "responses": RESPONSES, "messages": MESSAGES}


def declaration(api: str) -> dict[str, Any]:
    """The tool as `api` declares a function (a fresh copy: bodies are written out whole)."""
    return dict(DECLARATIONS[api])


def may_declare(body: dict[str, Any], api: str) -> bool:
    """Whether the tool may be added to `body` (of `api`): the client has no tool of its
    name and its tool_choice does not exclude it."""
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        return False
    if any(_named(tool) == TOOL_NAME for tool in tools or ()):
        return False
    return not _excludes(body.get("tool_choice"))


def with_tool(body: dict[str, Any], api: str) -> dict[str, Any]:
    """`body` with the tool declared after the client's own."""
    tools = body.get("tools")
    return {**body, "tools": [*(tools if isinstance(tools, list) else ()), declaration(api)]}


def _named(tool: Any) -> str | None:
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else tool.get("name")
    return name if isinstance(name, str) else None


def _excludes(choice: Any) -> bool:
    if choice is None or choice in ("auto", "required", "any"):
        return False
    if not isinstance(choice, dict):
        return True  # "none", or a value the proxy does not know: leave it be
    kind = choice.get("type")
    if kind in ("auto", "any"):
        return False
    if kind == "allowed_tools":  # a list of the tools the model may call
        inner = choice.get("allowed_tools")  # chat's shape; the Responses API's is flat
        allowed = (inner if isinstance(inner, dict) else choice).get("tools")
        return not any(_named(t) == TOOL_NAME for t in allowed or ())
    return True  # a tool named, forced: the recall tool would be an answer it did not ask for
