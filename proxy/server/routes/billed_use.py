"""What a billed passthrough request (embeddings, legacy completions) may bill at most,
read from its parsed body: its input's tokens, and every answer it may get at its limit.

Embeddings bill their input alone. A legacy completion bills its prompts (and `suffix`)
and, for each prompt, `best_of` (or `n`) answers of up to `max_tokens` (16 when unset,
as the API has it). Inputs may be text, lists of texts, token arrays or lists of them; a
shape the API does not take is held at its JSON's size (a token is at least a byte).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

LEGACY_MAX_TOKENS = 16  # the legacy completions API's answer limit when none is given


def billed_use(
    route: str, body: dict[str, Any], count_text: Callable[[str], int]
) -> tuple[int, int]:
    """(input tokens, answer tokens at most) of a body for `route`."""
    if route == "/v1/embeddings":
        return input_tokens(body.get("input"), count_text)[0], 0
    prompt, prompts = input_tokens(body.get("prompt", ""), count_text)
    suffix = body.get("suffix")
    if isinstance(suffix, str):
        prompt += count_text(suffix)
    answers = max(_count(body.get("n")), _count(body.get("best_of")))
    limit = body.get("max_tokens")
    if type(limit) is not int or limit < 0:
        limit = LEGACY_MAX_TOKENS
    return prompt, max(prompts, 1) * answers * limit


def input_tokens(value: Any, count_text: Callable[[str], int]) -> tuple[int, int]:
    """(tokens, how many inputs) of an `input` or `prompt`."""
    if isinstance(value, str):
        return count_text(value), 1
    if isinstance(value, list):
        if all(type(v) is int for v in value):
            return len(value), 1  # one token array
        if all(isinstance(v, str) for v in value):
            return sum(count_text(v) for v in value), len(value)
        if all(isinstance(v, list) and all(type(t) is int for t in v) for v in value):
            return sum(len(v) for v in value), len(value)
    try:
        return len(orjson.dumps(value)), 1
    except orjson.JSONEncodeError:  # nested past what orjson writes: the upstream refuses it
        return 0, 1


def _count(value: Any) -> int:
    return value if type(value) is int and value > 1 else 1
