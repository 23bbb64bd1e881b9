"""Placeholders: the one-line texts that stand where a turn's reply, or a stretch of turns,
was left out, each with the recall id of what it replaces; each depends only on what it
replaces, so it is the same from one request to the next while the same parts are gone
(the provider's prompt cache)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.planner.parts import LONGEST_ID, REPLY, recall_id

# The largest reply a placeholder names: the most digits its count can take (a body is at
# most a few million tokens), so that its cost is known before the reply's size is.
_LARGEST = 99_999_999


def reply_placeholder(tokens: int, recall: str) -> str:
    return f"[context-proxy: reply of {tokens:,} tokens omitted, recall {recall}]"


def turns_placeholder(turns: int, recall: str) -> str:
    s = "s" if turns != 1 else ""
    return f"[context-proxy: {turns:,} earlier turn{s} omitted, recall {recall}]"


def longest_reply_placeholder() -> str:
    """The longest reply placeholder: what every one costs at most."""
    return reply_placeholder(_LARGEST, LONGEST_ID)


def longest_turns_placeholder() -> str:
    return turns_placeholder(_LARGEST, LONGEST_ID)


@dataclass(frozen=True, slots=True)
class Mask:
    """A reply replaced by its placeholder (turn_choices.py): the item that carries it, the
    tokens it costs at most there, the tokens of the reply it stands for, and the message
    the reply starts at as the client sent it (its recall id is made from it only when the
    placeholder is written: most replies a plan prices are never masked); the reply's
    other items go."""

    key: int
    tokens: int
    reply: int
    source: Any = field(compare=False, repr=False)

    @property
    def recall(self) -> str:
        return recall_id(REPLY, self.source)

    @property
    def text(self) -> str:
        return reply_placeholder(self.reply, self.recall)
