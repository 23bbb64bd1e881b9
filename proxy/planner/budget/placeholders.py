"""Placeholders: the one-line texts that stand where a turn's reply, or a stretch of turns,
was left out; each depends only on what it replaces, so it is the same from one request
to the next while the same parts are gone (the provider's prompt cache)."""

from __future__ import annotations

from dataclasses import dataclass

# The largest reply a placeholder names: the most digits its count can take (a body is at
# most a few million tokens), so that its cost is known before the reply's size is.
_LARGEST = 99_999_999


def reply_placeholder(tokens: int) -> str:
    return f"[context-proxy: reply of {tokens:,} tokens omitted]"


def turns_placeholder(turns: int) -> str:
    return f"[context-proxy: {turns:,} earlier turn{'s' if turns != 1 else ''} omitted]"


def longest_reply_placeholder() -> str:
    """The longest reply placeholder: what every one costs at most."""
    return reply_placeholder(_LARGEST)


def longest_turns_placeholder() -> str:
    return turns_placeholder(_LARGEST)


@dataclass(frozen=True, slots=True)
class Mask:
    """A reply replaced by its placeholder (turn_choices.py): the item that carries it, the
    tokens it costs at most there, and the tokens of the reply it stands for; the reply's
    other items go."""

    key: int
    tokens: int
    reply: int

    @property
    def text(self) -> str:
        return reply_placeholder(self.reply)
