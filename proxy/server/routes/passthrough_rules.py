"""Passthrough rules: which other routes a team's key reaches, and what a billed one used.

In key mode a team reaches the planned routes and, past them, only what its policy's
`passthrough` lists (default: listing models, making embeddings). Teams that share an
upstream key share the provider account behind it: its stored chat completions,
responses, files and batches are not any one team's to list, read or delete.

Routes that bill tokens (embeddings, legacy completions) check the team's quota and are
charged what the upstream reports: the model is read from the head of the request body
and the usage from the tail of the answer (plain JSON or a stream's last events), without
holding either whole.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from typing import Any

import orjson

from proxy.policy import Policy

BILLED = frozenset({"/v1/embeddings", "/v1/completions"})
HEAD_BYTES = 4096  # of the request body: where its "model" is
TAIL_BYTES = 65_536  # of the answer: where its "usage" is
_MODEL = re.compile(rb'"model"\s*:\s*"([^"\\]{1,200})"')
_USAGE = re.compile(rb'"usage"\s*:\s*(\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\})')


def route_allowed(policy: Policy, method: str, path: str) -> bool:
    """Whether `policy` lets its keys reach `method path` (path as decoded, no trailing /)."""
    for rule in policy.passthrough:
        allowed_method, _, pattern = rule.partition(" ")
        if allowed_method in ("*", method) and fnmatchcase(path, pattern):
            return True
    return False


class Meter:
    """What a billed passthrough request used: its model and the upstream's usage."""

    def __init__(self) -> None:
        self._head = bytearray()
        self._tail = bytearray()

    def request_chunk(self, chunk: bytes) -> None:
        if len(self._head) < HEAD_BYTES:
            self._head += chunk[: HEAD_BYTES - len(self._head)]

    def answer_chunk(self, chunk: bytes) -> None:
        self._tail += chunk
        if len(self._tail) > 2 * TAIL_BYTES:
            del self._tail[:-TAIL_BYTES]

    def model(self) -> str:
        found = _MODEL.search(bytes(self._head))
        return found.group(1).decode("utf-8", "replace") if found else ""

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
