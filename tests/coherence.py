"""Coherence of a trimmed request (bench_quality.py, the end-to-end tests): can a model
follow what it gets?

The request's history (after its setup, before the current turn) is read as turns: a
user message (the question) and what follows it up to the next user message (the reply,
and any tool exchanges between); what follows the setup before the first question answers
the setup's own. Each original message is found in the forwarded request (the
order is kept, so one pass pairs them) in one of its forms: whole, cut (its head kept),
masked (a `[context-proxy: …]` placeholder in its place) or gone. Then, per request:

- split turns: a question forwarded with none of the reply that followed it (or with its
  final answer gone), or part of a reply forwarded without its question;
- previous turn kept: the newest history turn's question and reply both forwarded, in any
  form (None when the request has no history turn);
- recency inverted: one of the newest three turns gone (its question, or its reply) while
  an older turn is forwarded whole, where those three fit in half the budget.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Msg = dict[str, Any]
PROXY = "[context-proxy:"  # a placeholder, a recall, an omitted-turns marker
_HEAD = 64
NEWEST = 3

WHOLE, CUT, MASKED, GONE = "whole", "cut", "masked", "gone"


@dataclass
class Coherence:
    split: int
    previous: bool | None  # None: no history turn
    inverted: bool


def is_question(m: Msg) -> bool:
    """A user message that is a person speaking (not a text agent's command output)."""
    if m.get("role") != "user":
        return False
    content = m.get("content")
    return not (isinstance(content, str) and content.startswith("<output>"))


def _squeezed(text: str) -> str:
    return "".join(text.split())


def _call_ids(m: Msg) -> tuple[str, ...]:
    calls = m.get("tool_calls") or ()
    return tuple(str(c.get("id")) for c in calls if isinstance(c, dict))


def _form(original: Msg, sent: Msg) -> str | None:
    """How `sent` carries `original` (whole, cut, masked), or None when it does not."""
    if sent is original:
        return WHOLE
    if sent.get("role") != original.get("role"):
        return None
    made = sent.get("role") == "user" and str(sent.get("content") or "").startswith(PROXY)
    if made:
        return None  # a marker or a recall: the proxy's, in a user message
    if sent.get("tool_call_id") != original.get("tool_call_id"):
        return None
    if _call_ids(sent) != _call_ids(original):
        return None
    a, b = sent.get("content"), original.get("content")
    if str(a or "") == str(b or ""):
        return WHOLE
    if isinstance(a, str) and a.startswith(PROXY):
        return MASKED
    head = _squeezed(str(b or "")[:_HEAD])
    if isinstance(a, str) and head and _squeezed(a).startswith(head):
        return CUT
    if _call_ids(sent) and not str(a or "").strip():
        return CUT  # a call whose text was dropped
    return None


def _key(m: Msg) -> tuple[Any, ...]:
    return (m.get("role"), m.get("tool_call_id"), _call_ids(m), str(m.get("content") or ""))


def forms(messages: Sequence[Msg], out: Sequence[Msg]) -> list[str]:
    """Each original message's form in `out` (whole, cut, masked, gone). Messages sent as
    the very objects that came are paired first; the others are looked for between them,
    a message sent as it came before one that only opens alike."""
    found = [GONE] * len(messages)
    index = {id(m): k for k, m in enumerate(messages)}
    anchors: list[int | None] = []
    last = -1
    for sent in out:
        k = index.get(id(sent))
        if k is not None and k > last:
            found[k] = WHOLE
            last = k
            anchors.append(k)
        else:
            anchors.append(None)
    lo = 0
    for n, sent in enumerate(out):
        if anchors[n] is not None:
            lo = anchors[n] + 1  # type: ignore[operator]
            continue
        hi = next((a for a in anchors[n + 1 :] if a is not None), len(messages))
        key = _key(sent)
        k = next((k for k in range(lo, hi) if _key(messages[k]) == key), None)
        if k is not None:
            found[k], lo = WHOLE, k + 1
            continue
        for k in range(lo, hi):
            form = _form(messages[k], sent)
            if form is not None:
                found[k], lo = form, k + 1
                break
        # else: a message the proxy made (a recall, a marker, a summary)
    return found


@dataclass
class Turn:
    question: list[int]  # empty for the reply to the setup's own question
    rest: list[int]
    replies: list[int]  # its plain assistant messages (the last: its final answer)

    @property
    def answer(self) -> int | None:
        return self.replies[-1] if self.replies else None


def history_turns(
    messages: Sequence[Msg], setup: int, question: Callable[[Msg], bool] = is_question
) -> tuple[list[Turn], int]:
    """The history's turns (oldest first) and where the current turn starts."""
    asks = [k for k in range(setup, len(messages)) if question(messages[k])]
    current = asks[-1] if asks else len(messages)
    turns: list[Turn] = []
    k = setup
    while k < current:
        q: list[int] = []
        if question(messages[k]):
            q.append(k)
            k += 1
        rest: list[int] = []
        while k < current and not question(messages[k]):
            rest.append(k)
            k += 1
        plain = [
            i for i in rest if messages[i].get("role") == "assistant" and not _call_ids(messages[i])
        ]
        turns.append(Turn(q, rest, plain))
    return turns, current


def coherence(
    messages: Sequence[Msg],
    out: Sequence[Msg],
    setup: int,
    budget: int,
    cost: Callable[[Msg], int],
    question: Callable[[Msg], bool] = is_question,
) -> Coherence:
    found = forms(messages, out)
    turns, _ = history_turns(messages, setup, question)
    split = 0
    kept: list[bool] = []  # per turn: any of it forwarded
    whole: list[bool] = []
    for turn in turns:
        q_kept = not turn.question or any(found[i] != GONE for i in turn.question)
        r_kept = any(found[i] != GONE for i in turn.rest)
        # One placeholder may stand for a whole reply of several messages.
        answered = turn.answer is None or any(found[i] in (WHOLE, CUT) for i in turn.replies[-1:])
        answered = answered or any(found[i] == MASKED for i in turn.replies)
        if turn.question and not q_kept:
            split += r_kept  # a reply without its question
        elif turn.rest and (not r_kept or not answered):
            split += 1  # a question without the reply that followed it
        kept.append(q_kept and (not turn.rest or (r_kept and answered)))
        whole.append(all(found[i] == WHOLE for i in (*turn.question, *turn.rest)))
    asked = [t for t in range(len(turns)) if turns[t].question]
    previous = None
    if turns:
        last = turns[-1]
        previous = (not last.question or any(found[i] != GONE for i in last.question)) and (
            not last.rest or any(found[i] != GONE for i in last.rest)
        )
    inverted = False
    newest = asked[-NEWEST:]
    if newest:
        size = sum(cost(messages[i]) for t in newest for i in (*turns[t].question, *turns[t].rest))
        if 2 * size <= budget and any(not kept[t] for t in newest):
            inverted = any(whole[t] for t in asked if t < newest[0])
    return Coherence(split, previous, inverted)


_OMITTED = re.compile(r"\[context-proxy: (\d+) earlier turns? omitted\]")


def markers(out: Sequence[Msg]) -> int:
    """How many omitted-turn markers the forwarded request holds."""
    return sum(
        1 for m in out if isinstance(m.get("content"), str) and _OMITTED.search(m["content"])
    )
