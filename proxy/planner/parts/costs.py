"""Costs: what each item adds to the prompt, counted with the model's tokenizer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import orjson

from proxy.planner.parts.items import Kind, Layout
from proxy.planner.parts.messages import render, well_shaped
from proxy.types import Alongside, Body, Tokenizer

_OPAQUE_OVERHEAD = 4  # a message of an unknown shape: about what a role and framing cost


def count_message(tokenizer: Tokenizer, message: Any) -> int:
    """Tokens of one forwarded message; one of an unknown shape counted as its JSON text."""
    if well_shaped(message):
        return tokenizer.count_message(message)
    try:
        text = orjson.dumps(message, default=str).decode()
    except TypeError:
        text = repr(message)
    return tokenizer.count_text(text) + _OPAQUE_OVERHEAD


def overhead(tokenizer: Tokenizer, body: Body, messages: Sequence[Any]) -> int:
    """The request's tokens besides its messages (priming, tool schemas), for `messages`."""
    return tokenizer.count_request_overhead(
        {**body, "messages": [m for m in messages if isinstance(m, dict)]}
    )


def measure(layout: Layout, tokenizer: Tokenizer, known: Sequence[int] = ()) -> list[int]:
    """Sets every item's cost; returns each message's full cost as forwarded untrimmed.

    A message's own item costs the message without its blocks and heading sections; each
    of those costs its text. Counts are not additive, which is why the plan is re-counted.
    `known` holds counts already made of the messages as they came, when nothing was tagged.
    """
    cost, split, kind, stripped = layout.cost, layout.split, layout.kind, layout.stripped
    if known and not split and len(cost) == len(known):
        cost[:] = known  # every message one item, its key its index: the counts as made
        return list(known)
    full: list[int] = []
    for i, b in enumerate(layout.base):
        if known:
            c = known[i]
        elif kind[b] is Kind.OPAQUE:
            c = count_message(tokenizer, stripped[i])
        else:
            c = tokenizer.count_message(stripped[i])
        full.append(c)
        s = split.get(i)
        if s is None or len(s.items) == 1 or kind[b] is Kind.OPAQUE:
            cost[b] = c
            continue
        cost[b] = tokenizer.count_message(render(layout.message(i), dict.fromkeys(s.items[1:])))
        for key in s.items[1:]:
            cost[key] = tokenizer.count_text(layout.text[key])
    return full


def _plain(m: Any) -> bool:
    """A message with no x_context, no inline tag, nothing of an odd shape."""
    if type(m) is not dict or "x_context" in m:
        return False
    content = m.get("content")
    if type(content) is str:
        # Only a role and a text: well shaped without looking further.
        return _no_tag(content) and ((len(m) == 2 and "role" in m) or well_shaped(m))
    return well_shaped(m) and (
        content is None
        or not any(isinstance(p, dict) and "<context" in str(p.get("text", "")) for p in content)
    )


def _no_tag(text: str) -> bool:
    # A search for one character is several times faster than for "<context", and most
    # texts have no "<" at all.
    return "<" not in text or "<context" not in text


def untagged_counts(
    messages: list[Any],
    tokenizer: Tokenizer,
    alongside: Alongside | None = None,
) -> list[int] | None:
    """Each message's count when no message has a tag or an odd shape (nothing to strip
    or report), else None. `alongside`: see ChatTokenizer.count_messages."""
    for m in messages:  # _plain's common case inlined: this runs per message
        if not (
            (
                type(m) is dict
                and len(m) == 2
                and type(content := m.get("content")) is str
                and "role" in m
                and ("<" not in content or "<context" not in content)
            )
            or _plain(m)
        ):
            return None
    many = getattr(tokenizer, "count_messages", None)  # tokens.ChatTokenizer's batch count
    if many is not None:
        return cast(list[int], many(messages, alongside))
    count = tokenizer.count_message
    return [count(m) for m in messages]
