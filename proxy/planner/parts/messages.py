"""Messages as the planner reads and writes them: the shapes it understands, and a message
put back together from its parts once some of its items are replaced or removed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.planner.parts.items import Layout, MessageLayout

_EXTRAS = ("tool_calls", "function_call")  # what a message keeps only with its own text


def well_shaped(message: Any) -> bool:
    """A message the tokenizer and the planner understand; anything else is left alone."""
    if not isinstance(message, dict):
        return False
    content = message.get("content")
    calls = message.get("tool_calls")
    call = message.get("function_call")
    name = message.get("name")
    return (
        (content is None or isinstance(content, str | list))
        and (calls is None or isinstance(calls, list))
        and (call is None or isinstance(call, dict))
        and (name is None or isinstance(name, str))
    )


def part_texts(ml: MessageLayout, replace: Mapping[int, str | None]) -> dict[int | None, str]:
    """Each part's text after `replace` (item key -> new text, None = removed).

    An item spread over several pieces (text around blocks) takes its new text piece by
    piece: whole pieces while the new text still starts with them, the rest in the next.
    """
    pending = {k: v for k, v in replace.items() if v is not None}
    last: dict[int, tuple[int, int]] = {}
    for p, part in enumerate(ml.parts):
        for q, (key, _) in enumerate(part.pieces):
            last[key] = (p, q)
    out: dict[int | None, str] = {}
    for p, part in enumerate(ml.parts):
        chunks: list[str] = []
        for q, (key, text) in enumerate(part.pieces):
            if key not in replace:
                chunks.append(text)
                continue
            new = pending.get(key)
            if new is None:
                continue
            if last[key] != (p, q) and new.startswith(text):
                chunks.append(text)
                pending[key] = new[len(text) :]
            else:
                chunks.append(new)
                del pending[key]
        out[part.index] = "".join(chunks)
    return out


def render(ml: MessageLayout, replace: Mapping[int, str | None], *, bare: bool = False) -> Any:
    """The message with `replace` applied; `bare` also drops what belongs to its own text
    (images, tool calls) because only blocks of it are kept."""
    if not replace and not bare:
        return ml.stripped
    texts = part_texts(ml, replace)
    out: dict[str, Any] = dict(ml.stripped)
    content = ml.stripped.get("content")
    if isinstance(content, str):
        out["content"] = texts.get(None, content)
    elif isinstance(content, list):
        parts: list[Any] = []
        for p, part in enumerate(content):
            if p in texts:
                if texts[p] or not part.get("text"):
                    parts.append({**part, "text": texts[p]})
            elif not bare:
                parts.append(part)
        out["content"] = parts if parts or not content else ""
    if bare:
        for key in _EXTRAS:
            out.pop(key, None)
    return out


def tool_name(result: Any, call: Any) -> str:
    """The tool a result answers, named by its call (or the legacy message's `name`)."""
    ident = result.get("tool_call_id")
    calls = call.get("tool_calls") if type(call) is dict else None
    if type(calls) is list:
        for c in calls:
            f = c.get("function") if type(c) is dict else None
            if type(f) is dict and c.get("id") == ident and type(f.get("name")) is str:
                return str(f["name"])
    name = result.get("name")
    if type(name) is str:
        return name
    legacy = call.get("function_call") if type(call) is dict else None
    if type(legacy) is dict and type(legacy.get("name")) is str:
        return str(legacy["name"])
    if result.get("role") == "user":
        return "the command"  # a text agent's output (steps.py)
    return "a tool"


def calls_text(message: Any) -> str:
    """The names and arguments of a message's tool calls (an agent's commands), or ""."""
    if type(message) is not dict:
        return ""
    calls = message.get("tool_calls")
    out = [c.get("function") for c in calls if type(c) is dict] if type(calls) is list else []
    legacy = message.get("function_call")
    out.append(legacy)
    return "\n".join(
        f"{f.get('name', '')} {f.get('arguments', '')}" for f in out if type(f) is dict
    )


def command_text(layout: Layout, i: int) -> str:
    """What message i does: its tool calls' names and arguments, or a text agent's command
    (steps.py); "" for a message that does neither."""
    command = layout.commands.get(i)
    return command if command is not None else calls_text(layout.stripped[i])
