"""Cache mode: the recall of what stands out of the cut-off past for the turn (standout.py)."""

from __future__ import annotations

import math
import statistics
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.planner.history.recall import RECALL_HEAD
from proxy.planner.history.standout import (
    STATEMENT_WEIGHT,
    asks,
    carrying_on,
    standouts,
    without_own_label,
)
from proxy.planner.request import plan_request
from tests.planner.cache.test_cache_cut import (
    WINDOW,
    WORDS,
    conversation,
    forwarded,
    policy,
    stable_part,
    tokens,
)


def recall_of(out: list[Any]) -> list[Any]:
    return [m for m in out if str(m.get("content")).startswith(RECALL_HEAD)]


# --- the measure ---------------------------------------------------------------------------


def test_a_standout_is_a_units_score_in_deviations_above_the_bulk() -> None:
    # One unit far above the rest: its z-score against the bulk of the history (all but
    # the best 10%: here the 18 lowest of 20).
    scores = [float(i % 3) for i in range(19)] + [20.0]
    bulk = sorted(scores)[:18]
    expected = (20.0 - statistics.fmean(bulk)) / statistics.pstdev(bulk)
    found = standouts(scores)
    assert found[19] == pytest.approx(expected)
    assert max(found[:19]) < 2.0 < expected


def test_a_question_about_several_old_turns_still_stands_out() -> None:
    # Two strong matches: they do not raise the spread they are measured against.
    scores = [float(i % 3) for i in range(38)] + [20.0, 19.0]
    assert min(standouts(scores)[-2:]) > 10.0


def test_broad_matches_stand_out_less_than_one_specific_match() -> None:
    broad = [1.0, 0.2] * 10  # a word that half the history shares
    specific = [0.2] * 7 + [1.0] + [0.1] * 12  # a word said once, long ago
    assert max(standouts(specific)) > 2 * max(standouts(broad))


def test_nothing_stands_out_of_a_history_all_alike_or_below_the_bulk() -> None:
    assert standouts([0.0] * 4) == [0.0] * 4  # nothing relevant
    assert standouts([2.0] * 4) == [0.0] * 4  # all alike
    assert standouts([5.0]) == [0.0]
    assert standouts([0.0, 0.0, 9.0, 9.0])[:2] == [0.0, 0.0]  # below the bulk: never negative
    # One match in a history that otherwise scores nothing stands out without limit.
    assert standouts([0.0] * 19 + [4.0])[-1] == math.inf


@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=60))
def test_standouts_are_numbers_and_not_negative(scores: list[float]) -> None:
    found = standouts(scores)
    assert len(found) == len(scores)
    assert all(z >= 0.0 and not math.isnan(z) for z in found)


def test_carrying_on_is_the_newest_units_share_of_the_best_score() -> None:
    assert carrying_on([]) == 0.0
    assert carrying_on([0.0, 0.0]) == 0.0  # nothing relevant
    assert carrying_on([1.0, 4.0, 2.0]) == 0.5
    assert carrying_on([1.0, 4.0, 4.0]) == 1.0  # it answers the message before it
    assert carrying_on([4.0, 1.0, 0.0]) == 0.0


# --- in the plan -----------------------------------------------------------------------------


def test_a_turn_carrying_on_the_newest_topic_gets_no_recall() -> None:
    # Turn 39 is about the bakery; cut-off turns 7, 15, ... are too, and were recalled at
    # a fixed share before: what the turn is about is in view, so nothing is recalled now.
    messages = [*conversation(40), {"role": "user", "content": "More on the bakery w39x3?"}]
    body = {"model": "gpt-4o-mini", "messages": messages}
    out = forwarded(body, policy())
    assert len(out) < len(messages)  # trimmed by the stable cut
    assert recall_of(out) == []
    assert out[-1] == messages[-1]


def test_a_question_about_the_cut_off_past_recalls_what_stands_out() -> None:
    old = [f"w{t}x{t % 12}" for t in (3, 10, 17)]  # three turns said long ago
    messages = [*conversation(40), {"role": "user", "content": "Recall " + " ".join(old)}]
    body = {"model": "gpt-4o-mini", "messages": messages}
    out = forwarded(body, policy())
    (recall,) = recall_of(out)
    for word in old:
        assert word in recall["content"]
    assert WORDS.count_message(recall) <= 800  # recall_share (the whole budget) caps it
    assert tokens(WORDS, body, out) <= 800
    assert out[-2] is recall and out[-1] == messages[-1]


def test_a_large_recall_keeps_the_cached_prefix_and_the_newest_turns() -> None:
    """A question that needs more room than the plan and the turns since leave takes that
    of turns since the boundary but the newest `keep_recent`: what it forwards starts with
    most of what the turn before forwarded (cached), the newest turns are all there, and
    the turn after it starts with the turn before's stable part again."""
    history = conversation(30, words=30)
    old = [f"w{t}x{t % 12}" for t in (3, 10, 17)]
    before = history[:-1]  # the user turn 29
    ask = [*history, {"role": "user", "content": "Recall " + " ".join(old)}]
    after = [*history, {"role": "user", "content": "Thanks! And the bakery w23x3?"}]
    outs = [
        plan_request({"model": "m", "messages": m}, policy(), WORDS, WINDOW).body["messages"]
        for m in (before, ask, after)
    ]
    assert recall_of(outs[1])
    sent = "\n".join(str(m["content"]) for m in outs[1])
    for word in old:  # each old turn asked about is there: in the plan, or recalled
        assert word in sent
    first, deep = stable_part(outs[0]), stable_part(outs[1])
    shared = next(
        (i for i, (a, b) in enumerate(zip(first, deep, strict=False)) if a != b), len(first)
    )
    held = sum(WORDS.count_message(m) for m in first[:shared])
    assert held >= 0.5 * sum(WORDS.count_message(m) for m in first)
    newest = [m for m in history if m["role"] == "user"][-policy().history.keep_recent :]
    assert all(m in outs[1] for m in newest)  # the newest turns stay
    assert outs[2][: len(first)] == first or recall_of(outs[2])


def test_no_recall_inside_an_agent_loop() -> None:
    """In an agent's loop the recall would sit before every step's exchanges and change
    as they grow (none of them cached): only the loop's first request (the chat turn) has
    one."""
    old = [f"w{t}x{t % 12}" for t in (3, 10, 17)]
    turn = [*conversation(40), {"role": "user", "content": "What of " + " ".join(old) + "?"}]
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    loop = [
        *turn,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "found w1x1 and more"},
    ]
    assert recall_of(forwarded({"model": "m", "messages": turn}, policy()))
    out = forwarded({"model": "m", "messages": loop}, policy())
    assert recall_of(out) == []
    assert out[-3:] == loop[-3:]


# --- what a turn asks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("When did Caroline go to the support group?", True),
        ("Remind me what we said about the lease", True),
        ("tell me again about the trip", True),
        ("¿Dónde está?", True),
        ("それは何ですか？", True),
        ("Lucky you! They're priceless.", False),
        ("I listed the flat yesterday.", False),
        ("", False),
    ],
)
def test_asks_tells_questions_and_requests_from_statements(text: str, expected: bool) -> None:
    assert asks(text) is expected


def test_the_turns_own_speaker_label_is_not_a_mention() -> None:
    assert without_own_label("Caroline: Lucky you!") == "Lucky you!"
    assert without_own_label("Lucky you, Caroline!") == "Lucky you, Caroline!"
    assert without_own_label("Mary Ann Lee: hi") == "hi"


def test_a_statement_that_matches_old_turns_gets_less_recall_than_a_question() -> None:
    """The same words asked get a recall; said as a statement, only what stands out far
    more: a statement's standout counts STATEMENT_WEIGHT as much. A loose match said in
    passing gets none."""
    old = [f"w{t}x{t % 12}" for t in (3, 10, 17)]
    asked = [*conversation(40), {"role": "user", "content": "What of " + " ".join(old) + "?"}]
    said = [*conversation(40), {"role": "user", "content": "Nice, " + " ".join(old) + "."}]
    (question,) = recall_of(forwarded({"model": "m", "messages": asked}, policy()))
    statement = recall_of(forwarded({"model": "m", "messages": said}, policy()))
    assert sum(len(m["content"]) for m in statement) < len(question["content"])
    assert 0 < STATEMENT_WEIGHT < 1
    loose = [*conversation(40), {"role": "user", "content": "Nice, violin and Paris again."}]
    assert recall_of(forwarded({"model": "m", "messages": loose}, policy())) == []


def test_a_reply_to_the_message_before_gets_no_recall_the_same_question_cold_does() -> None:
    """A turn that names an old topic precisely but answers the message just before it
    (which names it too) is about what is in view; asked out of the blue, it is a question
    about the cut-off past."""
    history = conversation(40)
    history[11] = {"role": "user", "content": "Turn 5: my quokka marmalade won a prize."}
    ask = {"role": "user", "content": "Who judged the quokka marmalade?"}
    reply = [*history[:-1], {"role": "assistant", "content": "That quokka marmalade again!"}]
    cold = forwarded({"model": "m", "messages": [*history, ask]}, policy())
    warm = forwarded({"model": "m", "messages": [*reply, ask]}, policy())
    (recall,) = recall_of(cold)
    assert "quokka marmalade won" in recall["content"]
    assert recall_of(warm) == []
    assert warm[-1] == ask and warm[-2] == reply[-1]
