"""Answer step of the Responses API: usage and generated text read from a Response object."""

from __future__ import annotations

from typing import Any


def chat_usage(usage: Any) -> Any:
    """A Responses `usage` with the chat names added (prompt_tokens, completion_tokens,
    prompt_tokens_details.cached_tokens), so the usage row reads either; else as it is."""
    if not isinstance(usage, dict):
        return usage
    prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
    if not (isinstance(prompt, int) and isinstance(completion, int)):
        return usage
    out = {**usage, "prompt_tokens": prompt, "completion_tokens": completion}
    details = usage.get("input_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        out["prompt_tokens_details"] = {"cached_tokens": details["cached_tokens"]}
    return out


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
