"""Passthrough rules: which other routes a team's key reaches, and what a billed one used.

In key mode a team reaches the planned routes and, past them, only what its policy's
`passthrough` lists (default: listing models, making embeddings). Teams that share an
upstream key share the provider account behind it: its stored chat completions,
responses, files and batches are not any one team's to list, read or delete.

Routes that bill tokens (embeddings, legacy completions) are held against the team's
quotas like the planned ones, from their parsed body (billed_use.py), and charged what the
upstream reports: the usage is read from the tail of the answer (plain JSON or a stream's
last events), without holding it whole.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from typing import Any

import orjson

from proxy.policy import Policy

BILLED = frozenset({"/v1/embeddings", "/v1/completions"})
TAIL_BYTES = 65_536  # of the answer: where its "usage" is
_USAGE = re.compile(rb'"usage"\s*:\s*(\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\})')


def route_allowed(policy: Policy, method: str, path: str) -> bool:
    """Whether `policy` lets its keys reach `method path` (path as decoded, no trailing /)."""
    for rule in policy.passthrough:
        allowed_method, _, pattern = rule.partition(" ")
        if allowed_method in ("*", method) and fnmatchcase(path, pattern):
            return True
    return False


class Meter:
    """What a billed passthrough request used: the upstream's usage."""

    def __init__(self) -> None:
        self._tail = bytearray()

    def answer_chunk(self, chunk: bytes) -> None:
        self._tail += chunk
        if len(self._tail) > 2 * TAIL_BYTES:
            del self._tail[:-TAIL_BYTES]

    def usage(self) -> dict[str, Any] | None:
        """The last `usage` object of the answer, as chat completions' fields."""
        matches = _USAGE.findall(bytes(self._tail[-TAIL_BYTES:]))
        if not matches:
            return None
        try:
            usage = orjson.loads(matches[-1])
        except orjson.JSONDecodeError:
            return None
        if not isinstance(usage, dict):
            return None
        prompt, total = usage.get("prompt_tokens"), usage.get("total_tokens")
        if type(prompt) is not int or type(total) is not int:
            return None
        completion = usage.get("completion_tokens", total - prompt)
        return {"prompt_tokens": prompt, "completion_tokens": completion}
