"""Coherence of a trimmed request (bench_quality.py, the end-to-end tests): can a model
follow what it gets?

The request's history (after its setup, before the current turn) is read as turns: a
user message (the question) and what follows it up to the next user message (the reply,
and any tool exchanges between); what follows the setup before the first question answers
the setup's own. A system or developer message there (a summary) is in no turn. A text agent's step is read as a tool exchange: an assistant message
that ends with a shell command in a fenced block (its call) and the user message right
after it (what the command printed, or what the agent's harness said of it: no person
speaking). Each original message is found in the forwarded request (the order is kept, so
one pass pairs them) in one of its forms: whole, cut (its head kept), masked (a
`[context-proxy: …]` placeholder in its place) or gone. Then, per request:

- split turns: a question forwarded with none of the reply that followed it (or with its
  final answer gone), part of a reply forwarded without its question, or a text agent's
  command without its output (or the output without its command);
- previous turn kept: the newest history turn's question forwarded and its final answer
  as text a model can read (whole or cut, never a placeholder); for a turn of steps or
  tool exchanges with no final answer, its newest step with its output's text (None when
  the request has no history turn);
- recency inverted: one of the newest three turns gone (its question, or its reply) while
  an older turn is forwarded whole, where those three fit in half the room the required
  parts leave (the budget less the required parts: the setup, the current turn and the
  declared tools, the contract's measure);
- newest reply omitted: one of the newest three turns with its final answer masked or
  gone (or the turn gone) while an older turn is forwarded whole, where those three fit in
  half that room.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Msg = dict[str, Any]
PROXY = "[context-proxy:"  # a placeholder, a recall, an omitted-turns marker
CLEARED = "[context-proxy: result of"  # a text agent's output cleared, in its place
_HEAD = 64
_MIN_HEAD = 24  # characters a cut's head holds at least to be told apart from chance
NEWEST = 3
_OPERATOR = ("system", "developer")

WHOLE, CUT, MASKED, GONE = "whole", "cut", "masked", "gone"
_OMITTED = re.compile(r"\[context-proxy: ([\d,]+) earlier turns? omitted")


@dataclass
class Coherence:
    split: int
    previous: bool | None  # None: no history turn
    inverted: bool
    newest_omitted: bool = False


_FENCED_COMMAND = re.compile(r"```[ \t]*(?:bash|sh|shell|console|zsh)?[ \t]*\n[\s\S]*```\s*\Z")


def is_command(m: Msg) -> bool:
    """An assistant message that ends with a shell command in a fenced block (a text
    agent's action)."""
    content = m.get("content")
    return (
        m.get("role") == "assistant"
        and not m.get("tool_calls")
        and isinstance(content, str)
        and _FENCED_COMMAND.search(content[-4000:]) is not None
    )


def observations(messages: Sequence[Msg]) -> set[int]:
    """The user messages that answer a text agent's command (the one right after it), in
    a request whose assistant messages mostly end with one (a chat whose answer ends with
    a shell snippet is no text agent)."""
    replies = [k for k, m in enumerate(messages) if m.get("role") == "assistant"]
    commands = [k for k in replies if is_command(messages[k])]
    if 2 * len(commands) <= len(replies):
        return set()
    return {
        k + 1 for k in commands if k + 1 < len(messages) and messages[k + 1].get("role") == "user"
    }


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
    text = str(sent.get("content") or "")
    if sent.get("role") == "user" and text.startswith(PROXY) and not text.startswith(CLEARED):
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
    kept = _squeezed(a.split("\n[…", 1)[0]) if isinstance(a, str) and "\n[…" in a else ""
    if len(kept) >= _MIN_HEAD and _squeezed(str(b or "")).startswith(kept):
        return CUT  # its head kept (shorter than _HEAD), then the cut's marker
    if _call_ids(sent) and not str(a or "").strip():
        return CUT  # a call whose text was dropped
    return None


def _key(m: Msg) -> tuple[Any, ...]:
    return (m.get("role"), m.get("tool_call_id"), _call_ids(m), str(m.get("content") or ""))


def _unmerged(m: Msg) -> Msg:
    """A user message as it stood before the proxy merged its own text into it (a marker
    or a recall joined to the next user message, as Messages bodies need): its text parts
    but the proxy's, as one string when one part is left."""
    content = m.get("content")
    if m.get("role") != "user" or not isinstance(content, list):
        return m
    parts = [p for p in content if isinstance(p, dict)]
    texts = [p.get("text") for p in parts if p.get("type") == "text"]
    if len(texts) != len(parts) or not any(str(t).startswith(PROXY) for t in texts):
        return m
    own = [str(t) for t in texts if not str(t).startswith(PROXY)]
    if len(own) != 1:
        return m
    return {**m, "content": own[0]}


def _after_marker(out: Sequence[Msg]) -> list[int]:
    """Per forwarded message: how many turns a marker right before it (the message before,
    or a part merged ahead of its own text) says are left out there (0: no marker)."""
    said: list[int] = []
    before = 0
    for m in out:
        content = m.get("content")
        texts = [content] if isinstance(content, str) else []
        if isinstance(content, list):
            texts = [str(p.get("text")) for p in content if isinstance(p, dict)]
        counts = [_OMITTED.search(t) for t in texts]
        merged = len(texts) > 1 and counts[0] is not None and counts[-1] is None
        said.append(before or (int(counts[0].group(1).replace(",", "")) if merged else 0))
        whole = bool(counts) and all(c is not None for c in counts)
        before = sum(int(c.group(1).replace(",", "")) for c in counts if c) if whole else 0
    return said


def forms(messages: Sequence[Msg], out: Sequence[Msg]) -> list[str]:
    """Each original message's form in `out` (whole, cut, masked, gone). Messages sent as
    the very objects that came are paired first; the others are looked for between them,
    a message sent as it came before one that only opens alike. Of originals with the same
    text, one right after a marker of omitted turns is read as the one past as many turns
    as the marker says it stands for."""
    after_marker = _after_marker(out)
    out = [_unmerged(m) for m in out]
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
        same = [k for k in range(lo, hi) if _key(messages[k]) == key]
        if after_marker[n] and len(same) > 1:  # the one the marker's count of turns reaches
            asked = [sum(is_question(m) for m in messages[lo:k]) for k in same]
            same = [k for k, a in zip(same, asked, strict=True) if a == after_marker[n]] or same
        k = (same or [None])[0]
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
    steps: list[tuple[int, int]]  # a text agent's steps in it: (command, output)

    @property
    def answer(self) -> int | None:
        return self.replies[-1] if self.replies else None


def history_turns(
    messages: Sequence[Msg], setup: int, question: Callable[[Msg], bool] = is_question
) -> tuple[list[Turn], int]:
    """The history's turns (oldest first) and where the current turn starts."""
    outputs = observations(messages)
    asks = [k for k in range(setup, len(messages)) if k not in outputs and question(messages[k])]
    current = asks[-1] if asks else len(messages)
    turns: list[Turn] = []
    k = setup
    while k < current:
        q: list[int] = []
        if k in asks:
            q.append(k)
            k += 1
        rest: list[int] = []
        while k < current and k not in asks:
            if messages[k].get("role") not in _OPERATOR:  # a summary there: a part of its own
                rest.append(k)
            k += 1
        steps = [(i, i + 1) for i in rest if i + 1 in outputs and i + 1 < current]
        commands = {i for i, _ in steps}
        plain = [
            i
            for i in rest
            if messages[i].get("role") == "assistant"
            and not _call_ids(messages[i])
            and i not in commands
        ]
        turns.append(Turn(q, rest, plain, steps))
    return turns, current


def _readable(form: str) -> bool:
    return form in (WHOLE, CUT)


def _previous_kept(turn: Turn, found: list[str], messages: Sequence[Msg]) -> bool:
    """The newest turn kept as text a model can read: its question, and its final answer
    (whole or cut); a turn with no final answer, its newest step or tool exchange with its
    output's text."""
    if turn.question and not any(found[i] != GONE for i in turn.question):
        return False
    if turn.answer is not None:
        return _readable(found[turn.answer])
    if turn.steps:
        command, output = turn.steps[-1]
        return found[command] != GONE and _readable(found[output])
    results = [i for i in turn.rest if messages[i].get("role") == "tool"]
    if results:
        newest = messages[results[-1]].get("tool_call_id")
        same = [i for i in results if messages[i].get("tool_call_id") == newest]
        return all(_readable(found[i]) for i in same)
    return not turn.rest or any(found[i] != GONE for i in turn.rest)


def coherence(
    messages: Sequence[Msg],
    out: Sequence[Msg],
    setup: int,
    budget: int,
    cost: Callable[[Msg], int],
    question: Callable[[Msg], bool] = is_question,
) -> Coherence:
    found = forms(messages, out)
    turns, current = history_turns(messages, setup, question)
    split = 0
    kept: list[bool] = []  # per turn: any of it forwarded
    readable: list[bool] = []  # per turn: its question, and its final answer as text
    whole: list[bool] = []
    for turn in turns:
        q_kept = not turn.question or any(found[i] != GONE for i in turn.question)
        in_steps = {i for step in turn.steps for i in step}
        said = [i for i in turn.rest if i not in in_steps]
        r_kept = any(found[i] != GONE for i in turn.rest)
        # One placeholder may stand for a whole reply of several messages.
        answered = turn.answer is None or any(found[i] in (WHOLE, CUT) for i in turn.replies[-1:])
        answered = answered or any(found[i] == MASKED for i in turn.replies)
        if turn.question and not q_kept:
            split += r_kept  # a reply without its question
        elif said and (not any(found[i] != GONE for i in said) or not answered):
            split += 1  # a question without the reply that followed it
        elif not said and turn.rest and not r_kept:
            split += 1  # a question whose steps are all gone
        # A text agent's step: its command and its output go together.
        split += sum((found[c] == GONE) != (found[o] == GONE) for c, o in turn.steps)
        kept.append(q_kept and (not turn.rest or (r_kept and answered)))
        readable.append(
            q_kept
            and (not turn.rest or r_kept)
            and (turn.answer is None or _readable(found[turn.answer]))
        )
        whole.append(all(found[i] == WHOLE for i in (*turn.question, *turn.rest)))
    asked = [t for t in range(len(turns)) if turns[t].question]
    previous = _previous_kept(turns[-1], found, messages) if turns else None
    inverted = omitted = False
    newest = asked[-NEWEST:]
    if newest:
        size = sum(cost(messages[i]) for t in newest for i in (*turns[t].question, *turns[t].rest))
        older_whole = any(whole[t] for t in asked if t < newest[0])
        # The room the required parts leave: `budget` (the caller takes the declared tools
        # and the framing off it) less the setup and the current turn.
        required = sum(cost(m) for m in (*messages[:setup], *messages[current:]))
        if 2 * size <= budget - required and older_whole:
            inverted = any(not kept[t] for t in newest)
            omitted = any(not readable[t] for t in newest)
    return Coherence(split, previous, inverted, omitted)


def markers(out: Sequence[Msg]) -> int:
    """How many omitted-turn markers the forwarded request holds."""
    return sum(
        1 for m in out if isinstance(m.get("content"), str) and _OMITTED.search(m["content"])
    )
