"""Properties of trimmed conversations (hypothesis): a model can follow what it gets.

Random chats of turns (a question, sometimes two user messages in a row, replies short and long,
tool exchanges between), sometimes ending in an agent loop, under random windows, answer
limits and policies. Whatever is cut, checked from the forwarded messages alone:

- no turn is split: a question goes with its reply (whole, cut or as its placeholder), a
  reply or an exchange never without its question, the setup never without its answer;
- the previous turn is always forwarded, question and reply;
- every stretch of omitted turns is marked once, where it was, with how many it holds;
- the newest turns first: the newest `keep_recent` turns are forwarded whole while they fit
  in half the room the required parts leave, and the previous turn's reply is text (whole
  or cut at its head and end), never its placeholder, where the room holds a little of it;
- it fits: within the budget, or its required parts alone within the window less the
  answer's reserve; calls and results stay paired; order is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.errors import ContextLengthExceeded
from proxy.planner.request import plan_request
from proxy.policy.model import BudgetPolicy, CachePolicy, HistoryPolicy, Policy
from proxy.types import Tokenizer
from tests.planner_fakes import WordTokenizer

WORDS = WordTokenizer()
VOCAB = ["alpha", "beta", "tea", "Paris", "zebra", "ledger", "refund", "A12", "the"]
MARKER = re.compile(r"^\[context-proxy: (\d+) earlier turns? omitted, recall t[0-9a-f]{6}\]$")
PLACEHOLDER = "[context-proxy: "

short = st.integers(1, 12).map(lambda n: " ".join(VOCAB[i % 9] for i in range(n)))
long = st.integers(40, 300).map(lambda n: " ".join(VOCAB[(i * 7) % 9] for i in range(n)))
text = st.one_of(short, short, long)


@dataclass
class Chat:
    messages: list[dict[str, Any]]
    setup: int  # messages before the first assistant message
    current: int  # the last user message


@st.composite
def chats(draw: st.DrawFn) -> Chat:
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(short)})
    msgs.append({"role": "user", "content": "task " + draw(text)})
    calls = 0

    def exchange() -> None:
        nonlocal calls
        ids = [f"c{calls}_{k}" for k in range(draw(st.integers(1, 2)))]
        calls += 1
        made = [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": draw(short)}}
            for i in ids
        ]
        msgs.append({"role": "assistant", "content": None, "tool_calls": made})
        msgs.extend({"role": "tool", "tool_call_id": i, "content": draw(text)} for i in ids)

    def answer() -> None:
        for _ in range(draw(st.integers(0, 2))):
            exchange()
        for _ in range(draw(st.sampled_from([1, 1, 1, 2]))):
            msgs.append({"role": "assistant", "content": draw(text)})

    answer()  # the opening: what answers the setup
    for _ in range(draw(st.integers(0, 10))):
        for _ in range(draw(st.sampled_from([1, 1, 1, 2]))):
            msgs.append({"role": "user", "content": draw(text)})
        answer()
    current = len(msgs)
    msgs.append({"role": "user", "content": draw(text)})
    for _ in range(draw(st.integers(0, 3))):  # an agent loop after the last question
        exchange()
    for i, m in enumerate(msgs):
        if m["role"] != "tool":
            m["name"] = f"m{i}"
    setup = next(i for i, m in enumerate(msgs) if m["role"] == "assistant")
    return Chat(msgs, setup, current)


policies = st.builds(
    lambda relevance, keep, cache, overflow: Policy(
        history=HistoryPolicy(keep_recent=keep, relevance=relevance),
        cache=CachePolicy(enabled=cache),
        budget=BudgetPolicy(on_required_overflow=overflow),
    ),
    st.sampled_from(["bm25", "off"]),
    st.integers(0, 6),
    st.booleans(),
    st.sampled_from(["reject", "truncate"]),
)


def origin(m: dict[str, Any]) -> str | None:
    """Which original message a forwarded one came from (None: one the proxy made)."""
    if m.get("role") == "tool":
        return str(m["tool_call_id"])
    name = m.get("name")
    return name if isinstance(name, str) else None


@dataclass
class Turn:
    question: list[int]
    rest: list[int]
    replies: list[int]


def turns_of(chat: Chat) -> list[Turn]:
    msgs, out = chat.messages, []
    k = chat.setup
    while k < chat.current:
        q: list[int] = []
        if msgs[k]["role"] == "user":
            q.append(k)
            k += 1
        rest: list[int] = []
        while k < chat.current and msgs[k]["role"] != "user":
            rest.append(k)
            k += 1
        replies = [
            i for i in rest if msgs[i]["role"] == "assistant" and not msgs[i].get("tool_calls")
        ]
        out.append(Turn(q, rest, replies))
    return out


def key(msgs: list[dict[str, Any]], i: int) -> str:
    m = msgs[i]
    return str(m["tool_call_id"]) if m["role"] == "tool" else str(m["name"])


def check(chat: Chat, policy: Policy, window: int, answer: int, tokenizer: Tokenizer) -> None:
    msgs = chat.messages
    body: dict[str, Any] = {"model": "m", "messages": msgs}
    if answer:
        body["max_tokens"] = answer
    snapshot = orjson.dumps(body)
    try:
        out = plan_request(body, policy, tokenizer, window)
    except ContextLengthExceeded:
        return  # refused: past the window's limit (the planner's own properties cover it)
    assert orjson.dumps(body) == snapshot
    fwd = out.body["messages"]
    assert out.budget is not None
    limit = window - answer - 16
    over = ("required parts over the budget", "protected tool exchanges over the budget")
    if any(p.startswith(over) for p in out.problems):
        assert out.tokens_after <= max(limit, out.budget) or "could not fit" in out.problems[-1]
    else:
        assert out.tokens_after <= out.budget
    if not out.trimmed:
        return
    present = {origin(m): m for m in fwd}
    originals = {key(msgs, i): msgs[i] for i in range(len(msgs))}
    # Kept messages unchanged, or visibly cut or replaced; order kept.
    order = [list(originals).index(o) for o in (origin(m) for m in fwd) if o is not None]
    assert order == sorted(order)
    for o, m in present.items():
        if o is None or m == originals[o]:
            continue
        content = str(m.get("content"))
        assert content.startswith(PLACEHOLDER) or "[…" in content, (o, content[:80])
    # Calls and results paired.
    calls = {c["id"] for m in fwd for c in m.get("tool_calls") or ()}
    results = {m["tool_call_id"] for m in fwd if m["role"] == "tool"}
    assert calls == results
    history = turns_of(chat)
    kept = [(not t.question or any(key(msgs, i) in present for i in t.question)) for t in history]
    for t, alive in zip(history, kept, strict=True):
        rest = [key(msgs, i) in present for i in t.rest]
        if not alive:
            assert not any(rest), "a reply or an exchange without its question"
        elif t.replies:
            assert any(key(msgs, i) in present for i in t.replies), "a question without its reply"
        elif t.rest:
            assert any(rest), "a question without what followed it"
    if history:  # the previous turn: question and reply
        assert kept[-1]
        last = history[-1]
        assert not last.replies or any(key(msgs, i) in present for i in last.replies)
    # Each stretch of omitted turns: one marker, where it was, saying how many.
    expected: list[int] = []
    run = 0
    for alive in kept:
        if not alive:
            run += 1
        elif run:
            expected.append(run)
            run = 0
    if run:
        expected.append(run)
    marks = [int(m.group(1)) for x in fwd if (m := MARKER.match(str(x.get("content"))))]
    assert marks == expected
    for n, x in enumerate(fwd):  # a marker stands before the turn after its stretch
        if MARKER.match(str(x.get("content"))):
            assert x["role"] == "user" and (n + 1 == len(fwd) or fwd[n + 1]["role"] == "user")
    # The newest first: the newest `keep_recent` turns (the previous one at least) are
    # forwarded whole while they fit in half the room the required parts leave; the
    # previous turn's reply is text (whole or cut), never its placeholder, where the room
    # holds a little of it.
    required = sum(tokenizer.count_message(m) for m in msgs[: chat.setup])
    required += sum(tokenizer.count_message(m) for m in msgs[chat.current :])
    room = out.budget - required - tokenizer.count_request_overhead(body)
    if len(history) > 1 and not history[0].question:  # the opening's answer is the setup's
        room -= sum(tokenizer.count_message(msgs[i]) for i in history[0].replies)
    said = [n for n, t in enumerate(history) if t.question or t.replies]
    newest = said[-max(policy.history.keep_recent, 1) :] if said else []

    def size(t: Turn) -> int:  # its question and reply, as the planner pins them
        asked = [i for i in t.rest if i not in t.replies and msgs[i]["role"] != "tool"]
        asked = [i for i in asked if not msgs[i].get("tool_calls")]
        return sum(tokenizer.count_message(msgs[i]) for i in (*t.question, *asked, *t.replies))

    def text(i: int) -> bool:  # forwarded as text a model can read: whole or cut
        sent = present.get(key(msgs, i))
        return sent is not None and not str(sent.get("content")).startswith(PLACEHOLDER)

    if newest and sum(size(history[n]) for n in newest) <= room // 2:
        for n in newest:
            for i in (*history[n].question, *history[n].replies):
                assert present.get(key(msgs, i)) == msgs[i], "one of the newest turns not whole"
    marker = 16  # a marker of the turns omitted before it, with its recall id
    if history and history[-1].replies and room - size(history[-1]) - marker > 0:
        assert any(text(i) for i in history[-1].replies), "the previous reply as a placeholder"
    elif history and history[-1].replies and room > 200:
        last = history[-1]
        question = sum(tokenizer.count_message(msgs[i]) for i in last.question)
        if room - min(question, 140) > 120:
            assert any(text(i) for i in last.replies), "the previous reply as a placeholder"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chats(), policies, st.integers(60, 3000), st.sampled_from([0, 0, 50, 400]))
def test_trimmed_conversations_keep_whole_turns_the_newest_first(
    chat: Chat, policy: Policy, window: int, answer: int
) -> None:
    check(chat, policy, window, answer, WORDS)
