"""Summary spans: which stretches of history get a summary, their cache keys, and the prompt.

Spans are whole turns (a user message starts one) in fixed chunks of `chunk_turns`, counted
from the start of the conversation, so the same history gives the same spans on every later
turn, and the next turn of a conversation finds the summaries made for the previous one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from proxy.planner import role_of, shape
from proxy.tokens import deep_json_text

PROMPT_VERSION = "summary-v1"  # part of every key: a new prompt must not reuse old summaries
SYSTEM_PROMPT = (
    "Summarize the conversation excerpt below for someone who will continue the "
    "conversation without seeing it. Keep every fact, name, number, date, decision, "
    "commitment and open question, and who said what when it matters; leave out small talk "
    "and repetition. Write dense plain sentences in the language of the excerpt, with no "
    "preamble, in at most {max_tokens} tokens."
)
MAX_MESSAGE_CHARS = 6_000  # one huge tool result must not crowd out the rest of the span
MAX_TRANSCRIPT_CHARS = 60_000  # about 15k tokens: fits any summarizer model's window
_SYSTEM_ROLES = ("system", "developer")
_CUT = " […]"


@dataclass(frozen=True, slots=True)
class Span:
    start: int  # messages[start:end]
    end: int
    key: str


class ItemView(Protocol):
    """What is read from the plan report's items (proxy.planner.report.ItemReport)."""

    @property
    def message(self) -> int: ...

    @property
    def kind(self) -> str: ...

    @property
    def action(self) -> str: ...


def settings_tag(team: str, upstream: str, model: str, max_tokens: int) -> bytes:
    """What a summary belongs to, folded into every key: the team and the upstream that
    made it (a summary one team's upstream wrote is never served to another team, nor is
    the cache an oracle of what another team sent), and the settings that change it."""
    fields = (PROMPT_VERSION, team, upstream, model, str(max_tokens))
    return b"".join(len(f.encode()).to_bytes(4, "little") + f.encode() for f in fields)


def _normalized(message: Any) -> bytes:
    fields = message
    if isinstance(message, dict):
        fields = [message.get("role"), message.get("content"), message.get("tool_calls")]
    try:
        return orjson.dumps(fields, default=str, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # past orjson's 254 levels: written without recursion
        return deep_json_text(fields).encode()


def span_key(messages: Iterable[Any], settings: bytes) -> str:
    h = hashlib.sha256(settings)
    for m in messages:
        data = _normalized(m)
        h.update(len(data).to_bytes(8, "little"))  # length-prefixed: no two spans collide
        h.update(data)
    return h.hexdigest()


def chunk_spans(messages: Sequence[Any], chunk_turns: int, settings: bytes) -> list[Span]:
    """Full chunks of `chunk_turns` turns before the current turn, each with its key.

    The first chunk also holds what comes between the leading system messages and the
    first user message. A chunk that would split a tool group gets no span.
    """
    if chunk_turns < 1 or not messages:
        return []
    sh = shape(messages)
    lead = 0
    while lead < len(messages) and role_of(messages[lead]) in _SYSTEM_ROLES:
        lead += 1
    starts = [i for i in range(lead, sh.current_start) if role_of(messages[i]) == "user"]
    spans: list[Span] = []
    for first in range(0, len(starts) - chunk_turns + 1, chunk_turns):
        start = lead if first == 0 else starts[first]
        after = first + chunk_turns
        end = starts[after] if after < len(starts) else sh.current_start
        whole = all(
            start <= sh.units[sh.unit_of[i]][0] and sh.units[sh.unit_of[i]][-1] < end
            for i in range(start, end)
        )
        if whole and end > start:
            spans.append(Span(start, end, span_key(messages[start:end], settings)))
    return spans


def dropped_spans(
    spans: Sequence[Span],
    messages: Sequence[Any],
    items: Iterable[ItemView],
    cached: set[str],
) -> list[Span]:
    """Spans the plan dropped fully or mostly (over half their messages) that no summary
    covers: none of ours is cached and no client summary stands in for any member."""
    action: dict[int, str] = {}
    for it in items:
        if it.kind in ("message", "opaque"):  # a message's own item decides its fate
            action.setdefault(it.message, it.action)
    out: list[Span] = []
    for span in spans:
        if span.key in cached:
            continue
        members = [
            i for i in range(span.start, span.end) if role_of(messages[i]) not in _SYSTEM_ROLES
        ]
        fates = [action.get(i, "keep") for i in members]
        if "summarize" in fates:  # a client summary already stands in for part of it
            continue
        if members and 2 * fates.count("drop") > len(members):
            out.append(span)
    return out


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
            elif isinstance(p, dict):
                parts.append(f"[{p.get('type', 'attachment')}]")
        return "\n".join(parts)
    return "" if content is None else str(content)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(_CUT)] + _CUT


def transcript(messages: Sequence[Any]) -> str:
    """The span as plain text, one paragraph a message; system messages are kept by the
    planner anyway, so they are left out."""
    lines: list[str] = []
    for m in messages:
        role = role_of(m)
        if role in _SYSTEM_ROLES or not isinstance(m, dict):
            continue
        text = _text_of(m.get("content"))
        for call in m.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                text += f"\n[calls {fn.get('name')}({fn.get('arguments', '')})]"
        name = m.get("name")
        label = f"{role} ({name})" if isinstance(name, str) and name else role
        lines.append(f"{label}: {_cut(text.strip(), MAX_MESSAGE_CHARS)}")
    return _cut("\n\n".join(lines), MAX_TRANSCRIPT_CHARS)


def prompt_messages(messages: Sequence[Any], max_tokens: int) -> list[dict[str, str]]:
    """The summary call's messages for the span `messages`."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT.format(max_tokens=max_tokens)},
        {"role": "user", "content": "Conversation excerpt:\n\n" + transcript(messages)},
    ]
