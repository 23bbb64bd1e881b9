"""Costs: what each item adds to the prompt, counted with the model's tokenizer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from proxy.planner.items import Kind, Layout
from proxy.planner.trim import render
from proxy.types import Body, Tokenizer

_OPAQUE_OVERHEAD = 4  # a message of an unknown shape: about what a role and framing cost


def well_shaped(message: Any) -> bool:
    """A message the tokenizer and the planner understand; anything else is left alone."""
    if not isinstance(message, dict):
        return False
    content = message.get("content")
    calls = message.get("tool_calls")
    call = message.get("function_call")
    name = message.get("name")
    return (
        (content is None or isinstance(content, str | list))
        and (calls is None or isinstance(calls, list))
        and (call is None or isinstance(call, dict))
        and (name is None or isinstance(name, str))
    )


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
    full: list[int] = []
    items = layout.items
    for ml in layout.messages:
        base = items[ml.base]
        if known:
            cost = known[ml.index]
        elif base.kind is Kind.OPAQUE:
            cost = count_message(tokenizer, ml.stripped)
        else:
            cost = tokenizer.count_message(ml.stripped)
        full.append(cost)
        if len(ml.items) == 1 or base.kind is Kind.OPAQUE:
            base.cost = cost
            continue
        base.cost = tokenizer.count_message(render(ml, {k: None for k in ml.items[1:]}))
        for key in ml.items[1:]:
            items[key].cost = tokenizer.count_text(items[key].text)
    return full
