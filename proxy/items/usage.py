"""Answer step of the Responses API: the generated text of a Response object."""

from __future__ import annotations

from typing import Any


def output_text(response: Any) -> str:
    """The text and call arguments a Response generated, for estimating its tokens when the
    upstream sent no usage."""
    parts: list[str] = []
    output = response.get("output") if isinstance(response, dict) else None
    for item in output if isinstance(output, list) else ():
        if not isinstance(item, dict):
            continue
        for key in ("name", "arguments", "input"):
            if isinstance(item.get(key), str):
                parts.append(item[key])
        content = item.get("content")
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
    return "".join(parts)
