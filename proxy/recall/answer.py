"""The recall tool's answer: the parts asked for, quoted and attributed, within a size.

The model passes `ids` (recall ids from the markers) and/or a `query`. The parts the ids
name come first, in the order asked; then the omitted messages that best match the query;
all of them go out in the conversation's order, each quoted with whose it was (as the
recall message does: no line inside can pass for another speaker, for the proxy or for the
operator), until the answer holds `room` tokens. Bad arguments, unknown ids and an answer
with nothing in it are said in the answer itself: the model reads why, never a 500.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.recall.events import Call
from proxy.recall.lookup import Recallable
from proxy.types import Tokenizer

HEAD = "[context-proxy: recalled from earlier in this conversation, quoted]"
USAGE = (
    "[context-proxy: context_recall takes `ids` (a list of recall ids from the "
    "[context-proxy: …, recall …] markers) and/or `query` (what to look for in the "
    "parts left out)]"
)
MAX_IDS = 64  # ids read from one call
# Calls of one answer served: each is a look through the whole history, and a model may
# call the tool hundreds of times in one answer. The rest are told so, and why.
MAX_CALLS = 8
TOO_MANY = (
    f"[context-proxy: not served: this answer called context_recall more than {MAX_CALLS} "
    "times, and only the first were answered; ask for several ids, or one query, in a call]"
)
NOT_SERVED = "[context-proxy: not served, as the call before says]"  # short: there may be many
NO_ROOM = "[context-proxy: the context window has no room left for a recall in this answer]"
LAST = "[context-proxy: no more recalls in this answer: answer with what you have]"
_MIN_ROOM = 64  # tokens: a recall smaller than this holds nothing worth the round
MAX_QUERY_CHARS = 2_000
_MIN_PART = 48  # tokens: a part cut shorter than this is not worth sending
_CUT = "\n> […cut: the rest is over the recall's size]"


@dataclass(slots=True)
class Recalled:
    """The tool's answer: its text, what it costs, and the messages it holds."""

    text: str
    tokens: int
    parts: list[int] = field(default_factory=list)


def read_arguments(arguments: Any) -> tuple[list[str], str] | None:
    """The ids and the query of a call's arguments (a JSON string, or an object as the
    Messages API gives them); None when they are not a call of this tool."""
    if isinstance(arguments, str | bytes):
        try:
            arguments = orjson.loads(arguments or b"{}")
        except orjson.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    ids, query = arguments.get("ids", []), arguments.get("query", "")
    if isinstance(ids, str):
        ids = [ids]
    if not isinstance(ids, list) or not isinstance(query, str):
        return None
    ids = [i for i in ids if isinstance(i, str)][:MAX_IDS]
    if not ids and not query.strip():
        return None
    return ids, query[:MAX_QUERY_CHARS]


def answer_round(
    recallable: Recallable,
    calls: Sequence[Call],
    room: tuple[int, int],
    tokenizer: Tokenizer,
    last: bool,
) -> tuple[list[tuple[str, str]], int]:
    """The tool's answer to each call of one answer, by call id, and their tokens: the
    first MAX_CALLS served, each within `room` (what one call may return, what all of them
    may), the rest told they were not; `last`: each says no more rounds will follow."""
    each, left = room
    out: list[tuple[str, str]] = []
    used = 0
    for n, call in enumerate(calls):
        space = min(each, left - used)
        if n >= MAX_CALLS:
            text = TOO_MANY if n == MAX_CALLS else NOT_SERVED
        elif space < _MIN_ROOM:
            text = NO_ROOM
        else:
            text = answer(recallable, call.arguments, space, tokenizer).text
        if last:
            text += "\n" + LAST
        used += tokenizer.count_text(text)
        out.append((call.id, text))
    return out, used


def answer(recallable: Recallable, arguments: Any, room: int, tokenizer: Tokenizer) -> Recalled:
    """The answer to one call of the tool, at most `room` tokens (a note saying why when
    nothing fits)."""
    read = read_arguments(arguments)
    if read is None:
        return _note(USAGE, tokenizer)
    ids, query = read
    named: list[int] = []
    unknown: list[str] = []
    for recall_id in ids:
        span = recallable.span(recall_id)
        if not span:
            unknown.append(recall_id[:24])
        named += [i for i in span if i not in named]
    matched = [i for i, _ in recallable.matching(query)] if query.strip() else []
    # What the ids name and the query matches first (a stretch of turns may be long: the
    # parts of it the query points to come before the rest), then the other matches, then
    # the rest of what the ids name, in the order asked.
    inside = set(named)
    wanted = [i for i in matched if i in inside]
    wanted += [i for i in matched if i not in inside]
    taken = set(wanted)
    wanted += [i for i in named if i not in taken]
    notes: list[str] = []
    if unknown:
        notes.append(
            f"[context-proxy: no part left out of this conversation has the recall id "
            f"{', '.join(unknown)}]"
        )
    if not wanted:
        if not unknown:
            notes.append("[context-proxy: nothing left out of this conversation matches]")
        return _note("\n".join(notes), tokenizer)
    return _fitted(recallable, wanted, notes, room, tokenizer)


def _fitted(
    recallable: Recallable, wanted: list[int], notes: list[str], room: int, tokenizer: Tokenizer
) -> Recalled:
    """The wanted parts (the first first) in `room` tokens, sent in conversation order."""
    count = tokenizer.count_text
    used = count(HEAD) + sum(count(n) + 1 for n in notes)
    taken: dict[int, str] = {}
    left_out = 0
    for i in wanted:
        part = recallable.quoted(i)
        cost = count(part) + 1
        if used + cost <= room:
            taken[i] = part
            used += cost
            continue
        space = room - used - count(_CUT) - 1
        if not taken and space >= _MIN_PART:  # the first part alone is over: its head
            taken[i] = tokenizer.truncate_text(part, space) + _CUT
            used += count(taken[i]) + 1
            continue
        left_out += 1
    if left_out:
        notes.append(f"[context-proxy: {left_out} more part(s) matched; over the recall's size]")
    if not taken:
        return _note("\n".join(notes), tokenizer)
    chosen = sorted(taken)
    text = "\n".join([HEAD, *(taken[i] for i in chosen), *notes])
    return Recalled(text, count(text), chosen)


def _note(text: str, tokenizer: Tokenizer) -> Recalled:
    return Recalled(text, tokenizer.count_text(text))
