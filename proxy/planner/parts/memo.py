"""Head memo: the plan of a conversation as it stood at its step boundary, kept between
requests so that the turns until the next boundary do not plan it again.

Cache mode plans a conversation as of its last step boundary (cache/chat.py): a function of the
messages before it, the policy and the budget alone, the same on every turn of a step. A
worker keeps the plans it made by a digest of exactly those inputs (the messages' JSON,
the policy, the budget, the tokenizer, the summaries on offer), so a hit is the plan it
would make again; a replica without it makes the same. Bounded in entries and in the size
of what they forward, the least recently used going first.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.planner.parts.summaries import ExtraSummary
from proxy.policy import Policy
from proxy.relevance import TermIndex


@dataclass(frozen=True, slots=True)
class Head:
    """What a plan of the part before the boundary forwards, and its counts."""

    messages: list[Any]
    tokens_after: int
    counts: tuple[int, int, int, int, int, int]  # dropped, truncated, summarized, deduped,
    # trimmed, cleared
    problems: tuple[str, ...]
    size: int  # bytes of the forwarded messages' JSON, what it holds


def head_key(
    messages: Sequence[Any],
    policy: Policy,
    budget: int,
    tokenizer: str,
    summaries: Sequence[ExtraSummary],
) -> bytes | None:
    """The digest of everything the plan of `messages` depends on; None for messages
    nested deeper than orjson writes (254 levels; it reads 1,024): planned unmemoized,
    and their plan then written back or refused like any other."""
    digest = hashlib.blake2b(digest_size=32)
    digest.update(repr((policy, budget, tokenizer, summaries)).encode())
    try:
        digest.update(orjson.dumps(messages, default=repr))
    except orjson.JSONEncodeError:
        return None
    return digest.digest()


class PlanMemo:
    """Heads planned lately, by head_key; safe for plans in worker threads."""

    def __init__(self, max_entries: int = 256, max_bytes: int = 64 * 2**20) -> None:
        self._heads: OrderedDict[bytes, Head] = OrderedDict()
        self._bytes = 0
        self._max_entries, self._max_bytes = max_entries, max_bytes
        self._lock = threading.Lock()

    def get(self, key: bytes) -> Head | None:
        with self._lock:
            head = self._heads.get(key)
            if head is not None:
                self._heads.move_to_end(key)
            return head

    def put(self, key: bytes, head: Head) -> None:
        if head.size > self._max_bytes // 4:
            return  # one conversation does not take the memo from the others
        with self._lock:
            if key in self._heads:
                return
            self._heads[key] = head
            self._bytes += head.size
            while len(self._heads) > self._max_entries or self._bytes > self._max_bytes:
                self._bytes -= self._heads.popitem(last=False)[1].size

    def __len__(self) -> int:
        return len(self._heads)


@dataclass(slots=True)
class Kept:
    """What a worker keeps between requests for planning: the history's words (relevance)
    and, when it keeps them, its plans of conversations as of their step boundaries."""

    terms: TermIndex = field(default_factory=TermIndex)
    plans: PlanMemo | None = None
