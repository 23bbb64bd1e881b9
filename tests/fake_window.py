"""A fake upstream's context window, counted its own way (more than the proxy counts), and
its refusal of a request over it in each API's words:

- chat completions: 400 `context_length_exceeded`, "This model's maximum context length is
  W tokens. However, your messages resulted in N tokens. ..." (or, in vLLM's wording, code
  400 and "... However, your request has N input tokens. ...", or "'max_tokens' or
  'max_completion_tokens' is too large: K. ..." where the prompt alone fits);
- the Responses API: 400 `context_length_exceeded`, "Your input exceeds the context window
  of this model. ..." (no counts, as OpenAI says it);
- Messages: 400 `invalid_request_error`, "prompt is too long: N tokens > W maximum" (or, in
  the "sum" wording, "input length and `max_tokens` exceed context limit: N + K > W").

A request is counted over its JSON as sent (images' data aside, each IMAGE_TOKENS; earlier
turns' thinking aside, as Anthropic bills it): for
OpenAI's APIs with o200k (close to the proxy's exact count, a little over it), for
Messages with cl100k times CLAUDE_SCALE (more than the proxy's estimate); it is refused
when that and its answer's limit pass the window.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import orjson

from proxy.tokens.text import load_encoding

CLAUDE_SCALE = 1.45
IMAGE_TOKENS = 1_600
_IMAGE_DATA = re.compile(rb'"data":"[A-Za-z0-9+/=]{256,}"')


def count(raw: bytes, api: str = "chat") -> int:
    """The fake's count of a request body to `api` (Messages: earlier turns' thinking
    left out, as Anthropic leaves it out)."""
    if api == "messages":
        raw = _without_thinking(raw)
    images = len(_IMAGE_DATA.findall(raw))
    text = _IMAGE_DATA.sub(b"", raw).decode("utf-8", "replace")
    if api == "messages":
        tokens = len(_encoding("cl100k_base").encode(text, disallowed_special=()))
        return int(tokens * CLAUDE_SCALE) + images * IMAGE_TOKENS
    return len(_encoding("o200k_base").encode(text, disallowed_special=())) + images * 765


def _without_thinking(raw: bytes) -> bytes:
    body = orjson.loads(raw)
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            message["content"] = [
                b for b in content
                if not (isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking"))
            ]  # fmt: skip
    return orjson.dumps(body)


@cache
def _encoding(name: str) -> Any:
    return load_encoding(name)


def answer_limit(body: dict[str, Any]) -> int:
    for key in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        if type(body.get(key)) is int:
            return int(body[key])
    return 0


def refusal(api: str, raw: bytes, window: int, wording: str = "prompt") -> bytes | None:
    """The API's 400 body when the request `raw` is over `window`, else None."""
    body = orjson.loads(raw)
    n, k = count(raw, api), answer_limit(body)
    if n + k <= window:
        return None
    if api == "messages":
        if wording == "sum":
            text = (f"input length and `max_tokens` exceed context limit: {n} + {k} > "
                    f"{window}, decrease input length or `max_tokens` and try again")  # fmt: skip
        else:
            text = f"prompt is too long: {n} tokens > {window} maximum"
        error = {"type": "invalid_request_error", "message": text}
        return orjson.dumps({"type": "error", "error": error})
    if api == "responses":
        text = ("Your input exceeds the context window of this model. Please adjust your "
                "input and try again.")  # fmt: skip
        param = "input"
    elif wording == "vllm":  # vLLM's later words, its code a number
        if n <= window:
            text = (f"'max_tokens' or 'max_completion_tokens' is too large: {k}. This model's "
                    f"maximum context length is {window} tokens and your request has {n} "
                    f"input tokens ({k} > {window} - {n}).")  # fmt: skip
        else:
            text = (f"This model's maximum context length is {window} tokens. However, your "
                    f"request has {n} input tokens. Please reduce the length of the input "
                    "messages.")  # fmt: skip
        error = {"message": text, "type": "BadRequestError", "param": None, "code": 400}
        return orjson.dumps({"error": error})
    else:
        asked = (f"you requested {n + k} tokens ({n} in the messages, {k} in the completion)"
                 if k else f"your messages resulted in {n} tokens")  # fmt: skip
        text = (f"This model's maximum context length is {window} tokens. However, {asked}. "
                "Please reduce the length of the messages.")  # fmt: skip
        param = "messages"
    error = {"message": text, "type": "invalid_request_error", "param": param,
             "code": "context_length_exceeded"}  # fmt: skip
    return orjson.dumps({"error": error})
