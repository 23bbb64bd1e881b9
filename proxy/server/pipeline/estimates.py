"""Estimates: the completion tokens of an answer whose upstream reported no usage."""

from __future__ import annotations

import math

from proxy.types import Tokenizer

# An answer without `usage` is estimated: its first EXACT_CHARS counted exactly (a few
# milliseconds even for hostile text), the rest at the prefix's rate but never below a token
# per MAX_CHARS_PER_TOKEN characters: a 20 MB answer no longer holds the event loop for 17 s.
EXACT_CHARS = 32_768
MAX_CHARS_PER_TOKEN = 4.0


def estimate_completion(tokenizer: Tokenizer, text: str, chars_beyond: int = 0) -> int:
    """Tokens in `text` and `chars_beyond` more characters the stream tap did not keep:
    exact up to EXACT_CHARS, then extrapolated (bounded time)."""
    if len(text) <= EXACT_CHARS and not chars_beyond:
        return tokenizer.count_text(text)
    head_text = text[:EXACT_CHARS]
    head = tokenizer.count_text(head_text)
    # The rest at the head's rate, but at least a token per 4 characters: a head of
    # friendly text must not let hostile text after it be charged as almost nothing.
    rate = max(head / len(head_text) if head_text else 0.0, 1 / MAX_CHARS_PER_TOKEN)
    return head + math.ceil((len(text) - len(head_text) + chars_beyond) * rate)
