"""Recall ids: the short name every omission marker gives what it stands for.

An id is derived from the omitted content alone (a digest of the message it starts at, as
the client sent it, tags aside), so the same omission is marked with the same bytes in
every request (the provider's prompt cache keeps working), and the proxy can find what an
id names again in the request in flight (proxy/recall/), with nothing kept between
requests. Its kind says how far it reaches from that message: `t` a stretch of turns
(up to the next message forwarded as it came), `r` a reply (its assistant messages up to
the next one forwarded as it came), `m` the message alone (a cleared or cut result, a cut
part).
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

STRETCH, REPLY, MESSAGE = "t", "r", "m"
DIGEST_CHARS = 6  # hex digits of an id's digest
KINDS = (STRETCH, REPLY, MESSAGE)
# What a marker's id costs at most: the digits that tokenize worst (one token each).
LONGEST_ID = "m9a8b7c"
_FIELDS = ("role", "name", "tool_call_id", "content", "tool_calls", "function_call")


def recall_id(kind: str, message: Any) -> str:
    """The id of what starts at `message` (a chat message as the client sent it)."""
    return kind + message_digest(message)


def message_digest(message: Any) -> str:
    """Six hex digits of a digest of `message`'s role, name, call ids and content (its
    tags are not part of it: the same message tagged or not is the same content). Short,
    since every marker carries one (about 6 tokens with its word); within one request two
    omitted messages share one about once in 30,000 pairs, and then an id names both."""
    return hashlib.blake2b(_canonical(message), digest_size=DIGEST_CHARS // 2).hexdigest()


def _canonical(message: Any) -> bytes:
    if type(message) is not dict:
        return f"?{type(message).__name__}".encode()
    parts: list[str] = []
    for name in _FIELDS:
        value = message.get(name)
        if value is None:
            continue
        parts.append(name)
        parts.append(value if type(value) is str else _json(value))
    return "\x00".join(parts).encode("utf-8", "surrogatepass")


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError):  # nested past the writer's depth: its shape
        size = len(value) if isinstance(value, list | dict) else 0
        return f"<{type(value).__name__} of {size}>"
