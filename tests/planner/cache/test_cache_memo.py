"""Cache mode's memo of a conversation's plan as of its step boundary: a hit forwards what
planning again would, byte for byte; the memo is bounded."""

from __future__ import annotations

import orjson

from proxy.planner import Kept, PlanMemo, plan_request
from proxy.planner.parts import Head, head_key
from proxy.policy.model import Policy
from proxy.relevance import TermIndex
from tests.planner.cache.test_cache_cut import REAL, WINDOW, conversation, policy, replay


def test_a_memo_hit_forwards_what_planning_again_would() -> None:
    memo, terms = PlanMemo(), TermIndex()
    bodies = replay(conversation(80))[30:]
    for body in bodies:
        with_memo = plan_request(body, policy(), REAL, WINDOW, kept=Kept(terms, memo))
        without = plan_request(body, policy(), REAL, WINDOW)
        assert orjson.dumps(with_memo.body) == orjson.dumps(without.body)
        assert (with_memo.tokens_after, with_memo.dropped, with_memo.trimmed) == (
            without.tokens_after, without.dropped, without.trimmed
        )  # fmt: skip
        assert with_memo.report.to_json() == without.report.to_json()
    # A plan made once per step, not once per turn.
    assert 0 < len(memo) < len(bodies) // 3


def test_the_key_holds_everything_the_plan_depends_on() -> None:
    messages = conversation(5)
    key = head_key(messages, Policy(), 500, "o200k_base", ())
    assert key == head_key(list(messages), Policy(), 500, "o200k_base", ())
    assert key != head_key(messages, Policy(), 501, "o200k_base", ())
    assert key != head_key(messages, policy(), 500, "o200k_base", ())
    assert key != head_key(messages, Policy(), 500, "cl100k_base", ())
    assert key != head_key(messages[:-1], Policy(), 500, "o200k_base", ())


def test_the_memo_is_bounded_in_entries_and_bytes() -> None:
    memo = PlanMemo(max_entries=3, max_bytes=1000)
    for n in range(10):
        memo.put(bytes([n]), Head([], 0, (0, 0, 0, 0, 0, 0), (), 100))
    assert len(memo) == 3 and memo.get(bytes([9])) is not None and memo.get(bytes([0])) is None
    memo.put(b"big", Head([], 0, (0, 0, 0, 0, 0, 0), (), 600))  # over a quarter: not kept
    assert memo.get(b"big") is None
    for n in range(10, 14):
        memo.put(bytes([n]), Head([], 0, (0, 0, 0, 0, 0, 0), (), 240))
    assert len(memo) * 240 <= 1000
