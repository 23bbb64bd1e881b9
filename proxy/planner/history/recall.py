"""Recall: the turns cut off by a stable cut that matter to the current turn, as one message.

Cache mode keeps a prefix of the conversation unchanged from turn to turn; what relevance
brings back for the current question changes every turn, so it goes after that prefix, in
one synthetic message just before the current turn, and costs only its own tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, cast

from proxy.types import Tokenizer

RECALL_HEAD = "[context-proxy: recalled from earlier in this conversation, quoted]"
# The role of the recalled message: recalled text gains no privilege, so never a system or
# developer message (a fetched page saying "SYSTEM NOTICE" would speak as the operator);
# each part in it says whose it was and is quoted (quote), so that it speaks as no one.
RECALL_ROLE = "user"
_SPEAKERS = {"user": "User", "assistant": "Assistant"}
_RESULTS = ("tool", "function")
# A speaker label at the start of a turn ("Evan: ..."), as relevance reads it (term_index).
SPEAKER_LABEL = re.compile(r"\s*([^\W\d_][\w'.-]*(?: [^\W\d_][\w'.-]*){0,2}):\s")
# Turns tried past the first that did not fit: the rest are scored lower still, and a
# long history would otherwise be counted turn by turn on every request.
_MISSES = 32


def quote(who: str, text: str) -> str:
    """A recalled part: whose it was on a line of its own, then its text with every line
    behind "> " (any line break a model may read as one), so that no line inside can pass
    for another speaker, for the proxy or for the operator."""
    return f"{who}:\n" + "\n".join("> " + line for line in (text.splitlines() or [""]))


def speaker_line(message: Any) -> str | None:
    """A plain user or assistant message as a recalled part; None for anything else (tool
    calls and results, images, empty text are recalled with their exchange or not at all)."""
    if not isinstance(message, dict):
        return None
    role, content = message.get("role"), message.get("content")
    if role not in _SPEAKERS or not isinstance(content, str) or not content.strip():
        return None
    if message.get("tool_calls") or message.get("function_call"):
        return None
    name = message.get("name")
    who = _SPEAKERS[role] + (f" ({name[:64]})" if isinstance(name, str) and name else "")
    return quote(who, content)


def recall_message(
    line_of: Callable[[int], str | None],
    candidates: Sequence[int],
    scores: Sequence[float],
    room: int,
    tokenizer: Tokenizer,
) -> tuple[dict[str, str], list[int]] | None:
    """The recall message for the `candidates` units of the history (not forwarded; a
    recallable unit's line is `line_of(unit)`, else None), at most `room` tokens, and the
    units it holds (oldest first); None when nothing relevant fits.

    `scores`: every unit's relevance (the candidates scored against the whole history:
    the same statistics and neighbour spread as without cache mode); the best candidates
    go in, in conversation order, while the message fits."""
    if not candidates:
        return None
    head = {"role": RECALL_ROLE, "content": RECALL_HEAD}
    used = tokenizer.count_message(head)
    if used >= room:
        return None
    ranked = sorted(
        (u for u in candidates if scores[u] > 0.0),
        key=lambda u: (-scores[u], -u),  # the best first; ties: the newer first
    )
    chosen: list[int] = []
    lines: dict[int, str] = {}
    misses = 0
    for u in ranked:
        line = line_of(u)
        if line is None:
            continue
        lines[u] = line
        cost = tokenizer.count_text(line + "\n")  # the line break after the one before
        if used + cost <= room:
            chosen.append(u)
            used += cost
        else:
            misses += 1
            if misses > _MISSES or room - used < 8:
                break
    joined = getattr(tokenizer, "count_lines_message", None)  # tokens.ChatTokenizer's
    while chosen:
        chosen.sort()
        parts = [RECALL_HEAD, *(lines[u] for u in chosen)]
        if joined is not None:  # from the lines' own counts, where that is exact
            message, count = cast(tuple[dict[str, str], int], joined(RECALL_ROLE, parts))
        else:
            message = {"role": RECALL_ROLE, "content": "\n".join(parts)}
            count = tokenizer.count_message(message)
        if count <= room:  # counts are not quite additive
            return message, chosen
        worst = min(chosen, key=lambda u: (scores[u], u))
        chosen.remove(worst)
    return None
