"""Tool kinds: every tool a request declares, as the function the provider renders for it.

OpenAI publishes how function tools are rendered into the prompt (a TypeScript namespace,
function_schema.py), not how the others are. So that no declared tool counts as zero:
- `function` tools, nested (chat: `{"type": "function", "function": {...}}`) or flat (the
  Responses API: `{"type": "function", "name": ...}`), as themselves;
- `custom` tools (free-form input, with an optional grammar) as a function without
  parameters whose description also holds the input format's JSON (a grammar's text is
  sent to the model);
- a `namespace` (a group of tools under one name, as the Codex CLI declares them) as each
  of its tools, and its own name and description as one more entry;
- built-in tools (`web_search`, `file_search`, `computer_use_preview`, `mcp`,
  `local_shell`, `code_interpreter`, ...) and any kind not known here as their JSON text,
  which errs over rather than under.
"""

from __future__ import annotations

from typing import Any

from proxy.tokens.function_schema import json_text


def tool_functions(tools: Any) -> list[dict[str, Any]]:
    """The function entries `tools` render as (see the module's docstring); a tool that is
    not an object is left out (the body's shape check refuses it on the planned routes)."""
    out: list[dict[str, Any]] = []
    stack = list(reversed(tools)) if isinstance(tools, list) else []
    while stack:  # no recursion: namespaces may nest
        tool = stack.pop()
        if not isinstance(tool, dict):
            continue
        kind = tool.get("type", "function")
        if kind == "function":
            function = tool.get("function", tool)
            if isinstance(function, dict):
                out.append(function)
        elif kind == "custom":
            custom = tool.get("custom", tool)
            custom = custom if isinstance(custom, dict) else tool
            described = [custom.get("description"), custom.get("format")]
            text = " ".join(d if isinstance(d, str) else json_text(d) for d in described if d)
            out.append({"name": custom.get("name"), "description": text})
        elif kind == "namespace":
            own = {"name": tool.get("name"), "description": tool.get("description")}
            out.append({k: v for k, v in own.items() if v is not None})
            inner = tool.get("tools")
            if isinstance(inner, list):
                stack.extend(reversed(inner))
        else:
            name = kind if isinstance(kind, str) else "tool"
            out.append({"name": name, "description": json_text(tool)})
    return out


# A neutral body's tokens the provider adds on its own (Anthropic's tool-use system prompt):
# counted as they are, never scaled, never forwarded (only neutral bodies carry it).
PROVIDER_OVERHEAD = "x_provider_tokens"
# A neutral body's sign that its client caches its prompt (OpenAI's `prompt_cache_key`, or
# Anthropic's `cache_control` points, read into this key): its cuts are made in steps.
CACHE_SIGNAL = "prompt_cache_key"


def provider_tokens(body: Any) -> int:
    given = body.get(PROVIDER_OVERHEAD) if isinstance(body, dict) else None
    return given if type(given) is int and given > 0 else 0
