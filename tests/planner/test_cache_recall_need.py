"""Cache mode: the recall sized by the turn's need for the cut-off past (recall_need.py)."""

from __future__ import annotations

from typing import Any

from proxy.planner.recall import RECALL_HEAD
from proxy.planner.recall_need import recall_need, recall_size
from proxy.planner.request import plan_request
from tests.planner.test_cache_cut import (
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


def test_need_is_the_cut_off_share_of_the_best_scored() -> None:
    cut = [True, True, False, False]
    assert recall_need([0.0, 0.0, 3.0, 1.0], cut, [10] * 4, 100) == 0.0
    assert recall_need([3.0, 1.0, 0.0, 0.0], cut, [10] * 4, 100) == 1.0
    assert recall_need([3.0, 0.0, 1.0, 0.0], cut, [10] * 4, 100) == 0.75
    assert recall_need([0.0] * 4, cut, [10] * 4, 100) == 0.0  # nothing relevant


def test_need_counts_only_what_the_room_holds() -> None:
    # The best (kept) fills the room: the cut-off one ranked after it is not counted.
    assert recall_need([1.0, 0.0, 5.0, 0.0], [True, True, False, False], [10] * 4, 10) == 0.0
    assert recall_need([1.0, 0.0, 5.0, 0.0], [True, True, False, False], [10] * 4, 20) == 1 / 6


def test_size_rises_from_the_floor_to_the_cap() -> None:
    assert recall_size(0.5, 0.6, 0.9, 300) == 0
    assert recall_size(0.6, 0.6, 0.9, 300) == 0
    assert recall_size(0.75, 0.6, 0.9, 300) == 150
    assert recall_size(0.9, 0.6, 0.9, 300) == 300
    assert recall_size(1.0, 0.6, 0.9, 300) == 300


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
    old = [f"w{t}x{t % 12}" for t in (1, 2, 3, 4, 5, 6, 9, 10, 11, 12)]
    messages = [*conversation(40), {"role": "user", "content": "Recall " + " ".join(old)}]
    body = {"model": "gpt-4o-mini", "messages": messages}
    out = forwarded(body, policy())
    (recall,) = recall_of(out)
    size = WORDS.count_message(recall)
    assert size > 0.1 * 800  # the old fixed share: 10% of the 800-token budget
    assert size <= 0.5 * 800  # recall_share caps it
    for word in old:
        assert word in recall["content"]
    assert tokens(WORDS, body, out) <= 800
    assert out[-2] is recall and out[-1] == messages[-1]


def test_a_large_recall_keeps_the_cached_prefix() -> None:
    """The question takes the newest forwarded turns' room for its recall: what it still
    forwards before the recall is a prefix of the turn before's (cached), and the turn
    after it starts with the turn before's stable part again."""
    history = conversation(40)
    old = [f"w{t}x{t % 12}" for t in (1, 2, 3, 4, 5, 6, 9, 10, 11, 12)]
    before = [*history[:-2], history[-2]]  # the user turn 39
    ask = [*history, {"role": "user", "content": "Recall " + " ".join(old)}]
    after = [*history, {"role": "user", "content": "Thanks! And the bakery w39x3?"}]
    outs = [
        plan_request({"model": "m", "messages": m}, policy(), WORDS, WINDOW).body["messages"]
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
    old = [f"w{t}x{t % 12}" for t in (1, 2, 3, 4, 5, 6)]
    turn = [*conversation(40), {"role": "user", "content": "Look up " + " ".join(old)}]
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
