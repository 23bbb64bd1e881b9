"""Billed input cost of a replayed conversation, at the providers' own caching rules.

A replay is one client's consecutive requests; each trimmed prompt is priced by what the
provider would have served from its cache:

- OpenAI caches a prompt's prefix automatically: the tokens of the whole leading messages
  the previous request shares (bench_cache.cached_tokens: nothing under 1,024 tokens, then
  128-token steps), billed at the model's cached rate (gpt-4o: half its input price, from
  litellm's price map), the rest at the input price;
- Anthropic caches at the client's breakpoints: a client that marks the end of each
  request (the last message's last block, as chat clients and Claude Code do) writes that
  prefix at 1.25x the input price and reads the longest earlier prefix it starts with (an
  earlier request's whole prompt, at least 1,024 tokens, its end within 20 blocks of the
  breakpoint) at 0.1x; nothing is cached without a breakpoint.

Costs are in input-token units (an uncached token = 1).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from bench_cache import cached_tokens

OPENAI_CACHED = 0.5  # gpt-4o: cache_read_input_token_cost / input_cost_per_token
ANTHROPIC_READ, ANTHROPIC_WRITE = 0.1, 1.25
ANTHROPIC_MIN = 1024
LOOKBACK = 20  # blocks before a breakpoint where the API looks for an earlier entry


def openai_cost(prev: Sequence[Any] | None, out: Sequence[Any], costs: Sequence[int]) -> float:
    total = sum(costs)
    cached = cached_tokens(prev, out, costs)
    return total - cached + OPENAI_CACHED * cached


@dataclass
class AnthropicCache:
    """One client's prompt cache: the prefixes its earlier requests wrote."""

    written: set[bytes] = field(default_factory=set)

    def cost(self, out: Sequence[Any], costs: Sequence[int]) -> float:
        keys: list[bytes] = []  # each prefix of whole messages, by a digest of it
        chain = b""
        for m in out:
            chain = _digest(chain, m)
            keys.append(chain)
        total = sum(costs)
        if total < ANTHROPIC_MIN:
            return float(total)
        read = 0
        seen = 0
        prefix = [0]
        for c in costs:
            seen += c
            prefix.append(seen)
        for n in range(len(out), max(0, len(out) - LOOKBACK) - 1, -1):
            if n and keys[n - 1] in self.written and prefix[n] >= ANTHROPIC_MIN:
                read = prefix[n]
                break
        self.written.add(keys[-1])
        return ANTHROPIC_READ * read + ANTHROPIC_WRITE * (total - read)


def _digest(previous: bytes, message: Any) -> bytes:
    data = previous + orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(data, digest_size=16).digest()
