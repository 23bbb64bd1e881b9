"""Cache mode: the recall sized by the turn's need for the cut-off past (standout.py)."""

from __future__ import annotations

import math
import statistics
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.planner.cache.chat_recall import CACHEABLE_PREFIX
from proxy.planner.history.recall import RECALL_HEAD
from proxy.planner.history.standout import (
    RAMP_POWER,
    STATEMENT_WEIGHT,
    asks,
    carrying_on,
    recall_need,
    recall_size,
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


def test_need_is_the_standout_of_the_best_cut_off_unit() -> None:
    # One cut-off unit far above the rest: its z-score against the bulk of the history
    # (all but the best 10%: here the 18 lowest of 20).
    scores = [float(i % 3) for i in range(19)] + [20.0]
    cut = [False] * 20
    cut[19] = True
    bulk = sorted(scores)[:18]
    expected = (20.0 - statistics.fmean(bulk)) / statistics.pstdev(bulk)
    assert recall_need(scores, cut) == pytest.approx(expected)
    # The same standout among the kept units: the best cut-off one is only average.
    flipped = [not c for c in cut]
    assert recall_need(scores, flipped) < 2.0 < expected


def test_a_question_about_several_old_turns_still_stands_out() -> None:
    # Two strong matches: they do not raise the spread they are measured against.
    scores = [float(i % 3) for i in range(38)] + [20.0, 19.0]
    cut = [True] * 40
    assert recall_need(scores, cut) > 10.0


def test_broad_matches_stand_out_less_than_one_specific_match() -> None:
    cut = [True] * 15 + [False] * 5
    broad = [1.0, 0.2] * 10  # a word that half the history shares
    specific = [0.2] * 7 + [1.0] + [0.1] * 12  # a word said once, long ago
    assert recall_need(specific, cut) > 2 * recall_need(broad, cut)


def test_need_is_zero_without_a_cut_or_below_the_bulk() -> None:
    assert recall_need([3.0, 1.0, 0.0], [False, False, False]) == 0.0
    assert recall_need([0.0] * 4, [True, True, False, False]) == 0.0  # nothing relevant
    assert recall_need([2.0] * 4, [True, True, False, False]) == 0.0  # all alike
    assert recall_need([5.0], [True]) == 0.0
    # The best cut-off unit at or below the bulk's mean is no need (never negative).
    assert recall_need([0.0, 0.0, 9.0, 9.0], [True, True, False, False]) == 0.0
    # One match in a history that otherwise scores nothing stands out without limit.
    assert recall_need([0.0] * 19 + [4.0], [True] * 20) == math.inf


@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=60), st.data())
def test_need_is_a_number_and_not_negative(scores: list[float], data: st.DataObject) -> None:
    cut = data.draw(st.lists(st.booleans(), min_size=len(scores), max_size=len(scores)))
    need = recall_need(scores, cut)
    assert need >= 0.0 and not math.isnan(need)
    assert recall_size(need, 6.0, 20.0, 500) in range(501)


def test_size_rises_from_the_floor_to_the_cap() -> None:
    assert recall_size(0.5, 0.6, 0.9, 300) == 0
    assert recall_size(0.6, 0.6, 0.9, 300) == 0
    # Halfway between floor and full: (1/2) ** 4 of the cap, not half of it (RAMP_POWER):
    # the middling standouts are mostly chatter; the clear ones get (nearly) all.
    assert RAMP_POWER == 4
    assert recall_size(0.75, 0.6, 0.9, 320) == 20
    assert recall_size(0.84, 0.6, 0.9, 1000) == 409  # (0.8) ** 4
    assert recall_size(0.9, 0.6, 0.9, 300) == 300
    assert recall_size(1.0, 0.6, 0.9, 300) == 300
    assert recall_size(math.inf, 0.6, 0.9, 300) == 300


@given(st.floats(0, 30), st.floats(0, 30), st.floats(0, 30), st.integers(0, 10_000))
def test_size_never_falls_as_the_need_rises(a: float, b: float, floor: float, cap: int) -> None:
    full = floor + 5.0
    low, high = sorted((a, b))
    assert 0 <= recall_size(low, floor, full, cap) <= recall_size(high, floor, full, cap) <= cap


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


def test_a_question_about_the_cut_off_past_gets_more_than_the_old_fixed_share() -> None:
    old = [f"w{t}x{t % 12}" for t in (3, 10, 17)]  # three turns said long ago
    messages = [*conversation(40), {"role": "user", "content": "Recall " + " ".join(old)}]
    body = {"model": "gpt-4o-mini", "messages": messages}
    out = forwarded(body, policy())
    (recall,) = recall_of(out)
    size = WORDS.count_message(recall)
    assert size > 0.1 * 800  # the old fixed share: 10% of the 800-token budget
    assert size <= 800  # recall_share (the whole budget by default) caps it
    for word in old:
        assert word in recall["content"]
    assert tokens(WORDS, body, out) <= 800
    assert out[-2] is recall and out[-1] == messages[-1]


def test_a_large_recall_keeps_the_cached_prefix() -> None:
    """The question takes the newest forwarded turns' room for its recall: what it still
    forwards before the recall is a prefix of the turn before's (cached), and the turn
    after it starts with the turn before's stable part again."""
    history = conversation(40)
    old = [f"w{t}x{t % 12}" for t in (3, 10, 17)]
    large = policy(recall_full=8.0)  # the question (standout ~11) gets all 720 tokens
    before = [*history[:-2], history[-2]]  # the user turn 39
    ask = [*history, {"role": "user", "content": "Recall " + " ".join(old)}]
    after = [*history, {"role": "user", "content": "Thanks! And the bakery w39x3?"}]
    outs = [
        plan_request({"model": "m", "messages": m}, large, WORDS, WINDOW).body["messages"]
        for m in (before, ask, after)
    ]
    first, deep, last = (stable_part(o) for o in outs)
    assert recall_of(outs[1])
    assert len(deep) < len(first) and first[: len(deep)] == deep
    assert last[: len(first)] == first


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


def test_a_statement_that_matches_an_old_turn_gets_no_recall() -> None:
    """The same words asked get a recall; said as a statement they do not: a statement's
    standout counts STATEMENT_WEIGHT as much."""
    old = [f"w{t}x{t % 12}" for t in (3, 10, 17)]
    asked = [*conversation(40), {"role": "user", "content": "What of " + " ".join(old) + "?"}]
    said = [*conversation(40), {"role": "user", "content": "Nice, " + " ".join(old) + "."}]
    assert recall_of(forwarded({"model": "m", "messages": asked}, policy()))
    assert recall_of(forwarded({"model": "m", "messages": said}, policy())) == []
    assert 0 < STATEMENT_WEIGHT < 1


@pytest.mark.parametrize("share_of_cap", [0.75, 1.0])
def test_a_partial_recall_leaves_a_prefix_the_provider_caches(
    monkeypatch: pytest.MonkeyPatch, share_of_cap: float
) -> None:
    """A recall short of the whole share (a turn that points into the past, but not
    clearly) takes the newest turns' room only down to CACHEABLE_PREFIX tokens of the
    prefix sent before (below it the provider caches nothing, this turn nor the next);
    a full one (a clear question) may take it all."""
    from proxy.planner.cache import chat_recall

    window, budget = 5000, 4000  # the default ratio, no output reserved
    cap = budget  # recall_share 1.0
    history = conversation(200)
    before = history[:-1]  # the user turn 199, which recalls nothing
    ask = [*history, {"role": "user", "content": "Recall w3x3 w10x10 and w17x5"}]
    outs = [plan_request({"model": "m", "messages": before}, policy(), WORDS, window).body]
    assert not recall_of(outs[0]["messages"])
    monkeypatch.setattr(chat_recall, "recall_size", lambda *_: int(share_of_cap * cap))
    outs.append(plan_request({"model": "m", "messages": ask}, policy(), WORDS, window).body)
    first, deep = (stable_part(o["messages"]) for o in outs)
    assert recall_of(outs[1]["messages"])
    assert first[: len(deep)] == deep  # what it still forwards was sent before
    prefix = sum(WORDS.count_message(m) for m in deep)
    assert sum(WORDS.count_message(m) for m in first) > CACHEABLE_PREFIX
    if share_of_cap < 1.0:
        assert CACHEABLE_PREFIX <= prefix < CACHEABLE_PREFIX + 60  # one turn more at most
    else:
        assert prefix < CACHEABLE_PREFIX
    assert tokens(WORDS, {"model": "m", "messages": ask}, outs[1]["messages"]) <= budget


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
