"""Scoring for bench_quality.py: evidence kept, setup kept, fit, and the cached prefix.

Evidence survives when its message is forwarded as it came; or, cut, when a forwarded
message derived from it (the same role and tool call id, and the same first characters: a
cut keeps the head) still holds every one of its strings and is not a placeholder; or when
the proxy's recall message holds them all, once its quoting is taken off.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from bench_agents import exchanges
from quality_sets import Evidence, Msg, setup_length

PLACEHOLDER = "[context-proxy:"  # a cleared result, and the head of a recall message
_QUOTE = re.compile(r"^> ?", re.M)
_HEAD = 64  # characters a cut message keeps of its original


def recall_text(out: Sequence[Msg]) -> str:
    """The text of the proxy's recall messages, unquoted."""
    texts = [
        m["content"]
        for m in out
        if isinstance(m.get("content"), str) and m["content"].startswith(PLACEHOLDER)
    ]
    return _QUOTE.sub("", "\n".join(texts))


def kept_evidence(messages: Sequence[Msg], out: Sequence[Msg], evidence: Sequence[Evidence]) -> int:
    forwarded = {id(m) for m in out}
    same = {_key(m) for m in out}
    recalled = recall_text(out)
    kept = 0
    for ev in evidence:
        original = messages[ev.index]
        if id(original) in forwarded or _key(original) in same:
            kept += 1
            continue
        if all(k in recalled for k in ev.keys):
            kept += 1
            continue
        call, head = original.get("tool_call_id"), str(original.get("content"))[:_HEAD]
        for m in out:
            content = m.get("content")
            if (
                isinstance(content, str)
                and not content.startswith(PLACEHOLDER)
                and m.get("role") == original.get("role")
                and m.get("tool_call_id") == call
                and _squeezed(content).startswith(_squeezed(head))
                and all(k in content for k in ev.keys)
            ):
                kept += 1
                break
    return kept


def _squeezed(text: str) -> str:
    """`text` without whitespace: a result compacted (its JSON without spaces) is the same."""
    return "".join(text.split())


def _key(m: Msg) -> tuple[Any, ...]:
    return (m.get("role"), m.get("tool_call_id"), str(m.get("content")))


def setup_kept(messages: Sequence[Msg], out: Sequence[Msg]) -> bool:
    """Whether every message of the request's setup is forwarded as it came (but for the
    operator's messages tagged with a section of their own: a summary is not the setup)."""
    same = {_key(m) for m in out}
    return all(
        _key(m) in same
        for m in messages[: setup_length(messages)]
        if not (m.get("role") in ("system", "developer") and _own_section(m))
    )


def _own_section(m: Msg) -> bool:
    tag = m.get("x_context")
    return isinstance(tag, dict) and bool(tag.get("section") or tag.get("summary_of"))


def keep_newest(body: dict[str, Any], tok: Any, budget: int) -> list[Msg] | None:
    """What a plain trimmer does: the setup and the last message (with the tool exchange
    it ends), then whole units newest first until one does not fit; None when the setup
    and the newest unit alone do not fit."""
    messages = body["messages"]
    head = setup_length(messages)
    groups = exchanges(messages, head)
    if not groups:
        return list(messages)
    last = groups.pop()
    fixed = [*messages[:head], *(messages[i] for i in last)]
    room = budget - tok.count_request({**body, "messages": fixed})
    if room < 0:
        return None
    kept: list[int] = []
    for group in reversed(groups):
        cost = sum(tok.count_message(messages[i]) for i in group)
        if cost > room:
            break
        room -= cost
        kept[:0] = group
    return [*messages[:head], *(messages[i] for i in kept), *(messages[i] for i in last)]
