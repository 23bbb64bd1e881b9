"""Tests for the planning façade: every rule of the budget algorithm, end to end."""

from __future__ import annotations

import copy
import time
from typing import Any, cast

import orjson
import pytest

from proxy.errors import ContextLengthExceeded
from proxy.planner import Kept, Offered
from proxy.planner import request as planning
from proxy.planner.parts.decision import MARKER
from proxy.planner.request import ExtraSummary, plan_request
from proxy.policy.model import (
    BudgetPolicy,
    CachePolicy,
    HistoryPolicy,
    Policy,
    TagsPolicy,
    ToolsPolicy,
    VisibilityPolicy,
)
from proxy.relevance.scoring import TermIndex
from proxy.tokens.counter import TokenCounter
from proxy.types import Tokenizer
from tests.planner_fakes import WordTokenizer, without_ids

WORDS = WordTokenizer()
# The per-request planner (cache-stable cuts off), relevance off.
OFF = Policy(
    history=HistoryPolicy(keep_recent=2, relevance="off"), cache=CachePolicy(enabled=False)
)
# The same, with inline <context> blocks read in user messages too (tags.inline_in_user).
OFF_INLINE = Policy(
    history=HistoryPolicy(keep_recent=2, relevance="off"),
    cache=CachePolicy(enabled=False),
    tags=TagsPolicy(inline_in_user=True),
)


def words(n: int, word: str = "w") -> str:
    return " ".join(f"{word}{i}" for i in range(n))


def sys(text: str = "You are helpful.", **extra: Any) -> dict[str, Any]:
    return {"role": "system", "content": text, **extra}


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def assistant(text: str | None, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}


def chat(turns: int, size: int = 50) -> list[dict[str, Any]]:
    msgs = [sys()]
    for t in range(turns):
        msgs += [
            user(f"question{t} " + words(size, f"q{t}_")),
            assistant(f"answer{t} " + words(size, f"a{t}_")),
        ]
    return msgs


def body_of(messages: list[Any], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": messages, **extra}


def forwarded_tokens(body: dict[str, Any], tokenizer: Tokenizer = WORDS) -> int:
    return sum(
        tokenizer.count_message(m) for m in body["messages"]
    ) + tokenizer.count_request_overhead(body)


def actions(outcome: Any) -> list[tuple[int, str, str]]:
    return [(it.message, it.kind, it.action) for it in outcome.report.items]


# --- pass-through -----------------------------------------------------------------------


def test_within_budget_is_forwarded_as_it_came() -> None:
    body = body_of([sys(), user("hello")])
    out = plan_request(body, OFF, WORDS, 10_000)
    assert out.changed is False and out.body is body
    assert (out.trimmed, out.dropped, out.tokens_before) == (0, 0, out.tokens_after)
    assert out.budget == 8000


def test_within_budget_only_tags_removed() -> None:
    msgs = [
        sys("rules <context section='memory'>fact</context> b"),
        user("a <context section='memory'>fact</context> b", name="x"),
        user("q", x_context={}),
    ]
    body = body_of(msgs)
    snapshot = copy.deepcopy(body)
    out = plan_request(body, OFF, WORDS, 10_000)
    assert out.changed and out.trimmed == 0
    # The operator's tags are read and removed; a user's inline tag is text unless the
    # policy reads them there (forwarded as written); x_context is always removed.
    assert out.body["messages"] == [sys("rules fact b"), msgs[1], user("q")]
    assert body == snapshot
    out = plan_request(body, OFF_INLINE, WORDS, 10_000)
    assert out.body["messages"] == [sys("rules fact b"), user("a fact b", name="x"), user("q")]


def test_no_context_window_means_no_trimming() -> None:
    body = body_of([*chat(50), user("now", x_context={"section": "goal"})])
    out = plan_request(body, OFF, WORDS, None)
    assert out.budget is None and out.trimmed == 0
    assert len(out.body["messages"]) == len(body["messages"])
    assert "x_context" not in out.body["messages"][-1]


# --- fitting ------------------------------------------------------------------------------


def test_over_budget_fits_and_keeps_required_and_order() -> None:
    msgs = [*chat(40), user("the question")]
    out = plan_request(body_of(msgs), OFF, WORDS, 1000)
    assert out.changed and out.dropped > 0
    assert forwarded_tokens(out.body) == out.tokens_after <= out.budget == 800
    fwd = out.body["messages"]
    assert fwd[0] is msgs[0] and fwd[-1] is msgs[-1]
    assert fwd[1] is msgs[1]  # the setup: every message before the first answer
    # The opening (what answered the setup) stays, as its placeholder at least; then one
    # marker for the turns omitted; then the newest turns, whole and in order.
    assert fwd[2]["role"] == "assistant" and fwd[2]["content"].startswith("[context-proxy: reply")
    assert fwd[3]["role"] == "user"
    assert (
        without_ids(fwd[3]["content"]) == f"[context-proxy: {omitted(fwd)} earlier turns omitted]"
    )
    positions = [msgs.index(m) for m in fwd[4:]]
    # recency: what is kept of history is the newest turns, contiguous, none split
    assert positions == list(range(positions[0], len(msgs)))
    assert msgs[positions[0]]["role"] == "user"


def omitted(fwd: list[dict[str, Any]]) -> int:
    """The turns a forwarded chat of chat() dropped: 40 turns and the opening, less those
    that came through."""
    kept = sum(1 for m in fwd[4:-1] if m["role"] == "user")
    return 39 - kept


def test_max_tokens_reserves_output() -> None:
    body = body_of([*chat(40), user("now")], max_tokens=500)
    out = plan_request(body, OFF, WORDS, 1000)
    assert out.budget == 1000 - 500 - 16
    assert out.tokens_after <= out.budget


@pytest.mark.parametrize("tokenizer_model", ["gpt-4o-mini", "gpt-4", "claude-3-5-sonnet"])
def test_real_tokenizer_fits(tokenizer_model: str) -> None:
    tokenizer = TokenCounter().for_model(tokenizer_model, Policy())
    msgs = [
        *chat(60, 80),
        user("Which answer mentioned a17_3? <context section='memory'>Ünïcödé fact ✓</context>"),
    ]
    out = plan_request(body_of(msgs), Policy(), tokenizer, 4000)
    assert out.tokens_after <= out.budget == 3200
    assert out.tokens_after == sum(
        tokenizer.count_message(m) for m in out.body["messages"]
    ) + tokenizer.count_request_overhead(out.body)


# --- required overflow ----------------------------------------------------------------------


def test_required_overflow_within_the_window_is_forwarded_alone() -> None:
    """Required parts over the budget but within the window less the answer's reserve go
    alone (everything optional dropped), over the budget: never a refusal the client would
    not have had without the proxy."""
    body = body_of([sys(words(300)), user("task"), assistant(words(200)), user(words(600))])
    out = plan_request(body, OFF, WORDS, 1000)
    assert out.budget == 800 < out.tokens_after <= 1000 - 16
    fwd = out.body["messages"]
    assert fwd[0] is body["messages"][0] and fwd[1] is body["messages"][1]
    assert fwd[-1] is body["messages"][-1]
    assert without_ids(fwd[2]["content"]) == "[context-proxy: reply of 204 tokens omitted]"
    assert out.problems == [
        "required parts over the budget by 128 tokens: forwarded alone, within the context window"
    ]
    # The answer's reserve counts: with max_tokens the same parts no longer fit.
    with pytest.raises(ContextLengthExceeded) as info:
        plan_request({**body, "max_tokens": 100}, OFF, WORDS, 1000)
    assert "max_tokens" in info.value.message


def test_required_overflow_past_the_window_rejects_with_a_breakdown() -> None:
    body = body_of([sys(words(300)), user(words(900))])
    with pytest.raises(ContextLengthExceeded) as info:
        plan_request(body, OFF, WORDS, 1000)
    message = info.value.message
    assert "budget of 800" in message and "context window of 1,000" in message
    assert "system_prompt" in message and "recent_messages" in message
    assert info.value.code == "context_length_exceeded"


def test_required_overflow_cuts_the_system_prompt_last() -> None:
    """Past the window's limit, `truncate` cuts the required parts to that limit: never the
    operator's system prompt while anything else could be cut: the setup's user part
    first, then the current turn, then the system prompt."""
    policy = Policy(
        budget=BudgetPolicy(on_required_overflow="truncate"), history=HistoryPolicy(relevance="off")
    )
    task = user("the task " + words(300, "t"))
    body = body_of([sys(words(500)), task, assistant("ok"), user(words(300))])
    out = plan_request(body, policy, WORDS, 1000)
    fwd = out.body["messages"]
    assert 800 < out.tokens_after <= 1000 - 16
    assert fwd[0]["content"] == body["messages"][0]["content"]  # the system prompt whole
    assert fwd[1]["content"].startswith("the task t0 t1") and without_ids(
        fwd[1]["content"]
    ).endswith(MARKER + "]")
    assert fwd[-1]["content"] == body["messages"][-1]["content"]  # current turn untouched
    # Over by more: the task keeps its start (MIN_SETUP_PART), the current turn is cut
    # next, and the system prompt only when nothing else is left to cut.
    out = plan_request(body, policy, WORDS, 800)
    fwd = out.body["messages"]
    assert out.tokens_after <= 800 - 16
    assert fwd[0]["content"] == body["messages"][0]["content"]
    assert WORDS.count_text(fwd[1]["content"]) >= 128
    assert without_ids(fwd[-1]["content"]).endswith(MARKER + "]")
    out = plan_request(body_of([sys(words(700)), user(words(300))]), policy, WORDS, 700)
    fwd = out.body["messages"]
    assert out.tokens_after <= 700 - 16
    assert all(without_ids(fwd[k]["content"]).endswith(MARKER + "]") for k in (0, -1))


def test_required_overflow_cuts_current_turn_when_it_must() -> None:
    policy = Policy(budget=BudgetPolicy(on_required_overflow="truncate"))
    body = body_of([sys("short"), user(words(2000))])
    out = plan_request(body, policy, WORDS, 1000)
    assert out.tokens_after <= 1000 - 16
    assert without_ids(out.body["messages"][-1]["content"]).endswith(MARKER + "]")
    assert out.truncated == 1


def test_required_overflow_with_nothing_to_cut_forwards_the_request_as_it_came() -> None:
    # Found by the planner's property test: the required parts (two opaque messages and an
    # empty turn) are over a tiny window and nothing can be cut. The original body goes
    # (its bytes, not a copy), and the overflow is told once, with its real size.
    policy = Policy(budget=BudgetPolicy(on_required_overflow="truncate"))
    body = body_of([None, None, user("", name="m2")])
    out = plan_request(body, policy, WORDS, 20)
    assert out.body is body and not out.changed and out.trimmed == 0
    assert out.tokens_after == out.tokens_before == 18 > out.budget == 16
    assert out.problems[-2:] == [
        "required parts over the budget by 2 tokens and the context window's limit by 14: "
        "cut, the current turn and the system prompt last",
        "could not fit the budget of 16 tokens; sent 18",
    ]


LONG_HISTORY = [
    sys(),
    *[
        (user if i % 2 else assistant)(
            f"turn {i} about {'ledgers' if i == 7 else 'weather'} " + "x " * 3000
        )
        for i in range(1, 30)
    ],
    user("what about the ledgers?"),
]


def test_a_long_new_history_is_read_for_relevance_while_it_is_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The first look at a long conversation counts it in a thread and reads its words for
    # relevance meanwhile (here the count waits for the reading, to make that visible);
    # with relevance off nothing is read. The plan is the same.
    for relevance in ("bm25", "off"):
        policy = Policy(history=HistoryPolicy(relevance=relevance))
        terms = TermIndex()
        tokenizer = TokenCounter().for_model("gpt-4o", policy)
        count_many = tokenizer._text.count_many  # type: ignore[attr-defined]

        def slow(
            texts: list[str],
            terms: TermIndex = terms,
            count_many: Any = count_many,
            wait: float = 5.0 if relevance == "bm25" else 0.0,
        ) -> list[int]:
            deadline = time.monotonic() + wait
            while len(terms._docs) < len(LONG_HISTORY) and time.monotonic() < deadline:
                time.sleep(0.001)
            return cast(list[int], count_many(texts))

        monkeypatch.setattr(tokenizer._text, "count_many", slow)  # type: ignore[attr-defined]
        out = plan_request(body_of(LONG_HISTORY), policy, tokenizer, 128_000, kept=Kept(terms))
        assert not out.changed  # within the budget: forwarded as it came
        assert len(terms._docs) == (len(LONG_HISTORY) if relevance == "bm25" else 0)
    # Over a budget, the history read ahead plans as a fresh read would, and relevance
    # keeps the old turn the question is about.
    policy = Policy()
    planned = [
        plan_request(
            body_of(LONG_HISTORY),
            policy,
            TokenCounter().for_model("gpt-4o", policy),
            60_000,
            kept=Kept(terms),
        )
        for terms in (TermIndex(), None)
    ]
    assert orjson.dumps(planned[0].body) == orjson.dumps(planned[1].body) and planned[0].trimmed
    assert any("ledgers" in m["content"] for m in planned[0].body["messages"][1:-1])


def test_the_history_is_read_in_steps_only_while_the_count_runs() -> None:
    # Within the budget, what is not read by the time the count is done is not needed.
    texts = [user(f"turn {i} " + "word " * 5) for i in range(3 * planning._READ_STEP + 5)]
    answers = iter([True, True, False, True])
    terms = TermIndex()
    planning._read_history(texts, terms, lambda: next(answers))
    assert len(terms._docs) == 2 * planning._READ_STEP


# --- tool groups -------------------------------------------------------------------------------


def tool_turn(call_id: str, size: int) -> list[dict[str, Any]]:
    return [
        user(f"run {call_id}"),
        assistant(
            None,
            tool_calls=[
                {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        ),
        {"role": "tool", "tool_call_id": call_id, "content": words(size, call_id)},
        assistant(f"done {call_id}"),
    ]


def test_tool_groups_kept_or_dropped_whole() -> None:
    msgs = [sys()]
    for i in range(12):
        msgs += tool_turn(f"c{i}", 40)
    msgs.append(user("now"))
    out = plan_request(body_of(msgs), OFF, WORDS, 600)
    fwd = out.body["messages"]
    calls = {m["tool_calls"][0]["id"] for m in fwd if m.get("tool_calls")}
    results = {m["tool_call_id"] for m in fwd if m.get("role") == "tool"}
    assert calls == results and calls
    assert out.tokens_after <= out.budget


def test_an_old_exchange_too_big_for_the_room_goes_whole() -> None:
    """An exchange of an earlier turn is history ranked like an agent's (history/rank.py):
    kept whole or dropped with its call, never left cut to a head that rarely holds what
    the turn needs (choices._cuttable); the turn's words around it stay."""
    msgs = [sys(), *tool_turn("big", 2000), user("now")]
    policy = Policy(
        history=HistoryPolicy(keep_recent=3, relevance="off"),
        tools=ToolsPolicy(clear=False),
        cache=CachePolicy(enabled=False),
    )
    out = plan_request(body_of(msgs), policy, WORDS, 1000)
    fwd = out.body["messages"]
    assert not any(m.get("role") == "tool" or m.get("tool_calls") for m in fwd)
    assert out.truncated == 0 and out.dropped == 2 and out.tokens_after <= out.budget
    assert fwd[-1] == msgs[-1] and fwd[0] == msgs[0]


# --- sections, strategies, overflow ---------------------------------------------------------------


def test_score_strategy_keeps_the_best_retrieved_blocks() -> None:
    docs = "".join(
        f'<context section="retrieved_context" score="{s}">{words(150, f"d{s}")}</context>'
        for s in ("0.1", "0.9", "0.5", "0.7")
    )
    msgs = [sys(), *chat(20, 20), user("docs: " + docs), assistant("ok"), user("now")]
    out = plan_request(body_of(msgs), OFF_INLINE, WORDS, 1000)
    kept = [it for it in out.report.items if it.kind == "block" and it.action == "keep"]
    dropped = [it for it in out.report.items if it.kind == "block" and it.action == "drop"]
    assert kept and dropped
    assert out.tokens_after <= out.budget
    text = " ".join(str(m.get("content")) for m in out.body["messages"])
    assert "d0.9" in text and "d0.1" not in text


def test_memory_is_truncated_with_a_marker_not_dropped() -> None:
    system = "Rules.\n## Memory\n" + words(900, "fact")
    msgs = [sys(system), *chat(10, 20), user("now")]
    out = plan_request(body_of(msgs), OFF, WORDS, 1000)
    fwd_sys = out.body["messages"][0]["content"]
    assert fwd_sys.startswith("Rules.\n## Memory\nfact0 fact1")
    assert MARKER in fwd_sys
    assert out.tokens_after <= out.budget
    section = next(s for s in out.report.sections if s.section == "memory")
    assert section.truncated == 1 and section.reserved == 80


def test_low_section_keeps_its_reservation_and_high_comes_first() -> None:
    msgs = [sys(), assistant("Hello!"), user("old " + words(400)), assistant("old " + words(400))]
    msgs += [user('<context section="scaffolding_reminder">' + words(600, "r") + "</context> hi")]
    msgs.append(user("now"))
    policy = Policy(
        history=HistoryPolicy(keep_recent=5, relevance="off"),
        cache=CachePolicy(enabled=False),
        tags=TagsPolicy(inline_in_user=True),
    )
    out = plan_request(body_of(msgs), policy, WORDS, 1000)
    by_msg = {(it.message, it.kind): it for it in out.report.items}
    reminder = by_msg[(4, "block")]
    assert reminder.action == "truncate"
    assert reminder.tokens_after >= 40  # floor(800 * 0.05): its own reservation
    # high priority history first: the newest turn's question, its reply replaced by its
    # placeholder (it does not fit beside the reminder's reservation), never half a turn
    assert by_msg[(2, "message")].action == "keep"
    assert by_msg[(3, "message")].action == "clear"
    assert by_msg[(3, "message")].tokens_after == WORDS.count_message(
        {
            "role": "assistant",
            "content": "[context-proxy: reply of 405 tokens omitted, recall r000000]",
        }
    )
    assert out.tokens_after <= out.budget


# --- dedupe ------------------------------------------------------------------------------------


def test_dedupe_by_id_content_and_summary_lines() -> None:
    doc = words(40, "doc")
    msgs = [
        sys(
            "Base.\n## Memory\n- Alice lives in Paris\n- likes tea\n## Conversation Summary\n- alice LIVES in paris\n- we discussed cars\n"
        ),
        user(f'<context section="retrieved_context" id="k1">{doc}</context> first'),
        user(f'<context section="retrieved_context" id="k1">other text {doc}</context> second'),
        user(f'<context section="retrieved_context">  OTHER text {doc.upper()}  </context> third'),
        *chat(20, 30)[1:],
        user("now"),
    ]
    out = plan_request(body_of(msgs), OFF_INLINE, WORDS, 1200)
    deduped = [it for it in out.report.items if it.action == "dedupe"]
    reasons = " | ".join(it.reason for it in deduped)
    assert "duplicate id 'k1'" in reasons
    assert "same content" in reasons
    assert "summary lines already in memory" in reasons
    assert (
        "alice lives in paris"
        not in out.body["messages"][0]["content"].lower().split("## conversation summary")[1]
    )
    assert out.deduped == len(deduped) >= 3


def test_within_budget_no_dedupe() -> None:
    msgs = [sys(), user("same long content " * 10), user("same long content " * 10), user("now")]
    out = plan_request(body_of(msgs), OFF, WORDS, 100_000)
    assert out.deduped == 0 and not out.changed


# --- summaries ----------------------------------------------------------------------------------


def clustered(n_cluster: int) -> list[dict[str, Any]]:
    """An early cluster of turns (tagged by the client on its user messages) and the
    client's summary of it, sent as a system message (an assistant's tag is not read)."""
    msgs = [sys(), assistant("Hello!")]
    for t in range(n_cluster):
        msgs += [
            user(f"early{t} " + words(60), x_context={"cluster": "early"}),
            assistant(f"reply{t} " + words(60)),
        ]
    msgs.append(sys("SUMMARY of the early part", x_context={"summary_of": "early"}))
    msgs += chat(6, 40)[1:]
    msgs.append(user("now"))
    return msgs


def test_summary_takes_the_place_of_the_first_dropped_member() -> None:
    msgs = clustered(6)
    out = plan_request(body_of(msgs), OFF, WORDS, 900)
    fwd = out.body["messages"]
    summary = next(i for i, m in enumerate(fwd) if m.get("content") == "SUMMARY of the early part")
    assert "x_context" not in fwd[summary]
    assert out.summarized > 0
    assert any(it.action == "summary-inserted" for it in out.report.items)
    # it sits where the first dropped member was: right after what was kept before it (the
    # opening's answer), before the marker of the turns it stands for
    assert [without_ids(m.get("content")) for m in fwd[summary - 1 : summary + 2 : 2]] == [
        "Hello!",
        "[context-proxy: 5 earlier turns omitted]",
    ]
    assert out.tokens_after <= out.budget


def test_summary_removed_when_its_cluster_is_kept_whole() -> None:
    msgs = [sys(), assistant("Hi"), user("old " + words(400)), assistant("old " + words(400))]
    msgs += [user("a", x_context={"cluster": "k"}), user("b", x_context={"cluster": "k"})]
    msgs += [sys("summary of k", x_context={"summary_of": "k"}), user("now")]
    out = plan_request(body_of(msgs), OFF, WORDS, 600)
    contents = [m.get("content") for m in out.body["messages"]]
    assert "a" in contents and "b" in contents and "summary of k" not in contents
    item = next(it for it in out.report.items if it.message == 6)
    assert item.action == "drop" and "kept whole" in item.reason


def test_extra_summary_replaces_a_dropped_span() -> None:
    msgs = [*chat(30), user("now")]
    extra = [ExtraSummary(1, 21, "the first ten turns, in short", key="abc")]
    out = plan_request(body_of(msgs), OFF, WORDS, 1200, offered=Offered(extra))
    fwd = out.body["messages"]
    assert fwd[1] is msgs[1]  # the setup, kept whole: the summary stands in for the rest
    assert fwd[2]["role"] == "system" and "the first ten turns" in fwd[2]["content"]
    assert out.summarized > 0 and out.tokens_after <= out.budget


# --- relevance, visibility, report ------------------------------------------------------------------


def test_relevance_keeps_an_old_turn_about_the_question() -> None:
    msgs = [sys(), assistant("Hi, how can I help?")]
    msgs += [user("my locker code is 4417 and the zebra is blue"), assistant("noted")]
    msgs += chat(30, 30)[1:]
    msgs.append(user("what colour is the zebra?"))
    on = plan_request(body_of(msgs), Policy(), WORDS, 1000)
    off = plan_request(body_of(msgs), OFF, WORDS, 1000)
    assert any("zebra is blue" in str(m.get("content")) for m in on.body["messages"])
    assert not any("zebra is blue" in str(m.get("content")) for m in off.body["messages"])


def test_visibility_note_is_counted() -> None:
    policy = Policy(
        visibility=VisibilityPolicy(prompt_report=True), history=HistoryPolicy(relevance="off")
    )
    out = plan_request(body_of([*chat(30), user("now")]), policy, WORDS, 1000)
    system = out.body["messages"][0]["content"]
    assert "Context budget:" in system and "/800 tokens" in system
    assert forwarded_tokens(out.body) <= 800
    small = plan_request(body_of([sys(), user("hi")]), policy, WORDS, 1000)
    assert small.changed and "Context budget:" in small.body["messages"][0]["content"]


def test_report_json_shape() -> None:
    out = plan_request(body_of([*chat(30), user("now")]), OFF, WORDS, 1000)
    data = orjson.loads(orjson.dumps(out.report.to_json()))
    assert data["budget"] == 800 and data["tokens_after"] == out.tokens_after
    assert {"section", "reserved", "allocated", "used", "kept", "dropped", "truncated"} <= set(
        data["sections"][0]
    )
    item = data["items"][1]
    assert {"message", "role", "section", "priority", "tokens", "action", "reason"} <= set(item)
    assert data["counts"]["drop"] == out.dropped
    assert out.trimmed == out.dropped + out.truncated + out.deduped + out.summarized


def test_deterministic() -> None:
    msgs = [*clustered(5), user("again <context section='memory' id='m'>x y z</context>")]
    a = plan_request(body_of(msgs), Policy(), WORDS, 900)
    b = plan_request(body_of(copy.deepcopy(msgs)), Policy(), WORDS, 900)
    assert orjson.dumps(a.body) == orjson.dumps(b.body)
    assert a.report.to_json() == b.report.to_json()


@pytest.mark.parametrize(
    "odd",
    [
        None,
        7,
        "s",
        [1, 2],
        {"role": "user", "content": {"nested": [None]}},
        {"role": "user", "content": None},
        {"role": "assistant", "tool_calls": [None, 3, {"function": None}]},
        {"role": ["x"], "content": "c"},
    ],
)
def test_odd_messages_never_crash(odd: Any) -> None:
    msgs = [*chat(20), odd, user("now")]
    out = plan_request(body_of(msgs), Policy(), WORDS, 600)
    assert odd in out.body["messages"] or (odd is None and None in out.body["messages"])
    assert out.tokens_after <= out.budget


# --- the terminal view -------------------------------------------------------------------------


def test_plan_view_table_and_colour() -> None:
    from proxy.cli.plan_view import render_plan

    out = plan_request(
        body_of([*chat(30), user("now <context section='memory'>m</context>")]), OFF, WORDS, 1000
    )
    plain = render_plan(out.report)
    assert "budget 800" in plain and "recent_messages" in plain and "\x1b[" not in plain
    assert "items: over budget" in plain  # a run of alike drops folded into one line
    coloured = render_plan(out.report, color=True)
    assert "\x1b[31m" in coloured and "\x1b[32m" in coloured
    every = render_plan(out.report, collapse=False)
    assert len(every.splitlines()) > len(plain.splitlines())


def example_session() -> dict[str, Any]:
    from pathlib import Path

    return dict(
        orjson.loads((Path(__file__).parents[2] / "examples" / "agent_session.json").read_bytes())
    )


def test_example_session_shows_every_action_per_request() -> None:
    """examples/per-request/default.yaml (cache off): every kind of decision on show, at
    the model's window and at a small one (where the setup's cluster is summarized)."""
    from proxy.tokens.windows import ContextWindows

    body = example_session()
    policy = Policy(cache=CachePolicy(enabled=False), tags=TagsPolicy(inline_in_user=True))
    tokenizer = TokenCounter().for_model(body["model"], policy)
    window = ContextWindows().lookup(body["model"], policy)
    assert window is not None
    out = plan_request(body, policy, tokenizer, window)
    actions = {it.action for it in out.report.items}
    assert {"keep", "drop", "clear", "dedupe"} <= actions
    assert out.tokens_before > 20_000 and out.tokens_after <= out.budget
    kinds = {it.kind for it in out.report.items}
    assert {"block", "heading", "message"} <= kinds
    small = plan_request(example_session(), policy, tokenizer, 2000)
    assert {"summarize", "summary-inserted"} <= {it.action for it in small.report.items}
    assert small.tokens_after <= small.budget


def test_example_session_is_trimmed_out_of_the_box() -> None:
    """The default: a conversation (not an agent loop) is planned per request (cache mode's
    `chats` off); it fits, its setup forwarded as it came."""
    from proxy.tokens.windows import ContextWindows

    body = example_session()
    policy = Policy()
    tokenizer = TokenCounter().for_model(body["model"], policy)
    out = plan_request(body, policy, tokenizer, ContextWindows().lookup(body["model"], policy))
    assert out.tokens_before > 20_000 and out.tokens_after <= out.budget
    dropped = [it for it in out.report.items if it.action == "drop"]
    assert dropped and not any("cache-stable cut" in it.reason for it in dropped)
    kinds = {it.kind for it in out.report.items}
    assert {"block", "heading", "message"} <= kinds


# --- work shared between tries -------------------------------------------------------------------


def test_a_reused_planner_plans_as_a_fresh_one() -> None:
    """The planner keeps its dedupe and choices between budgets (re-plans, the note's try):
    every budget gets the plan a new planner would make, the dedupe saving taken once."""
    from proxy.planner.budget.allocation import Planner
    from proxy.planner.parts.costs import measure
    from proxy.planner.parts.run import Run
    from proxy.planner.parts.sections import build_layout

    msgs = [
        sys("Base.\n## Memory\n- likes tea\n## Conversation Summary\n- likes tea\n- cars\n"),
        user(words(30, "same")),
        user(words(30, "same")),
        *chat(12, 30)[1:],
        user("now"),
    ]

    def planner() -> Planner:
        layout = build_layout(msgs, OFF)
        measure(layout, WORDS)
        return Planner(layout, Run({"messages": msgs}, OFF, WORDS, 2000, None, None))

    reused = planner()
    budgets = [900, 400, 250, 900, 120]
    for budget in budgets:
        fresh = planner().plan(budget, 3)
        again = reused.plan(budget, 3)
        assert again.decisions == fresh.decisions
        assert again.allocated == fresh.allocated
    actions = {d.action for d in reused.plan(400, 3).decisions.values()}
    assert "dedupe" in actions and "drop" in actions  # both paths were exercised


def test_untagged_counts_are_the_message_counts_or_none() -> None:
    from proxy.planner.parts.costs import untagged_counts as _untagged_counts

    plain = [sys(), user("a < b, no tag here"), assistant(None, tool_calls=[]), user("q")]
    assert _untagged_counts(plain, WORDS) == [WORDS.count_message(m) for m in plain]
    for odd in (
        user('see <context section="memory">x</context>'),
        {**user("hi"), "x_context": {"section": "memory"}},
        {"role": "user", "content": [{"type": "text", "text": "<context>x</context>"}]},
        {"role": "user", "content": 5},
        "not a message",
    ):
        assert _untagged_counts([*plain, odd], WORDS) is None
