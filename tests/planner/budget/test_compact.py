"""Compaction of JSON tool results: the same document without its spaces, or nothing; and
which old results are compacted or cut for a need (pick)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.planner.budget.clearing import Clearable, pick
from proxy.planner.budget.compact import compact_json
from proxy.planner.parts import Action, Decision
from proxy.planner.request import plan_request
from proxy.policy.model import CachePolicy, Policy
from proxy.tokens import TokenCounter

GPT_4O = TokenCounter().for_model("gpt-4o", Policy())


def test_indented_and_spaced_json_loses_only_its_spaces() -> None:
    value = {"name": {"first": "Mia Li", "note": "a, b: c"}, "ids": [1, 2.5, None, True]}
    for text in (json.dumps(value), json.dumps(value, indent=2), f"\n  {json.dumps(value)}\n"):
        assert compact_json(text) == (
            '{"name":{"first":"Mia Li","note":"a, b: c"},"ids":[1,2.5,null,true]}'
        )


def test_what_is_not_a_json_object_or_array_is_left_alone() -> None:
    for text in ("", "plain output: 3 files", '"a string"', "42", "[1, 2", "{'a': 1}", "[1, 2] x"):
        assert compact_json(text) is None


def test_a_change_beyond_whitespace_leaves_the_text_as_it_came() -> None:
    # Each would come back written another way: a number, an escape, a duplicate key, an
    # integer past 64 bits, NaN.
    for text in (
        '{"price": 1.50,  "x": 1}',
        '{"price": 1e5,   "x": 1}',
        '{"name": "caf\\u00e9",   "x": 1}',
        '{"a": 1,   "a": 2}',
        '{"big": 123456789012345678901234567890,   "x": 1}',
        '{"n": NaN,   "x": 1}',
    ):
        assert compact_json(text) is None, text


def test_already_compact_json_saves_too_little_to_change() -> None:
    assert compact_json('{"a":1,"b":[1,2,3],"c":"text with spaces inside"}') is None
    text = '{"a":1, "b":"a longer value of forty-odd characters"}'
    assert compact_json(text) is None  # one space in 55 characters: under 5%


_JSON: Any = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(_JSON, st.sampled_from([None, 1, 2, 4]), st.booleans())
def test_a_compacted_text_is_the_same_json_and_the_same_text_but_for_spaces(
    value: Any, indent: int | None, ascii_only: bool
) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    packed = compact_json(text)
    if packed is None:
        return
    assert json.loads(packed) == json.loads(text)
    assert "".join(packed.split()) == "".join(text.split())
    assert len(packed) < len(text)
    assert compact_json(packed) is None  # once is all it takes


def _clearable(key: int, saving: int, lossless: bool) -> Clearable:
    action = Action.COMPACT if lossless else Action.CLEAR
    return Clearable(key, saving, Decision(action, "why", "text", 1))


def test_every_compaction_is_taken_even_when_one_would_do() -> None:
    order = [_clearable(k, 50, True) for k in range(4)] + [_clearable(0, 80, False)]
    out = pick(order, need=10, room=1000)
    assert set(out) == {0, 1, 2, 3} and all(d.action is Action.COMPACT for d in out.values())
    assert pick(order, need=0, room=1000) == {}  # within the budget: nothing touched


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 400), st.booleans()), max_size=16),
    st.integers(-50, 3000),
    st.integers(0, 3000),
)
def test_pick_compacts_all_and_cuts_only_as_far_as_needed(
    entries: list[tuple[int, int, bool]], need: int, room: int
) -> None:
    # Compactions first, as clearable() lists them, each key at most once per kind.
    seen: set[tuple[int, bool]] = set()
    order = []
    for key, saving, lossless in sorted(entries, key=lambda e: not e[2]):
        if (key, lossless) not in seen:
            seen.add((key, lossless))
            order.append(_clearable(key, saving, lossless))
    out = pick(order, need, room)
    if need <= 0:
        assert out == {}
        return
    assert {c.key for c in order if c.lossless} <= out.keys()
    cuts = [c for c in order if not c.lossless]
    taken = [c for c in cuts if out.get(c.key) is c.decision]
    left = need - sum(c.saving for c in order if c.lossless)
    if sum(c.saving for c in cuts) >= left:  # enough: a prefix of the cuts, none past the need
        assert taken == cuts[: len(taken)]
        assert sum(c.saving for c in taken[:-1]) < left or not taken


def test_json_nested_deeper_than_orjson_writes_is_left_as_it_came() -> None:
    """orjson reads 1,024 levels and writes 254: such a result is not compacted, and a plan
    over the budget holding it still fits (the result is cleared instead)."""
    deep = "[ " * 300 + "1" + " ]" * 300
    assert compact_json(deep) is None
    assert compact_json("[ " * 200 + "1" + " ]" * 200) is not None  # within what it writes
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "agent"},
        {"role": "user", "content": "go"},
    ]
    for i in range(5):
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function",
             "function": {"name": "fetch", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": deep if i == 0 else "ok"},
        ]  # fmt: skip
    body = {"model": "gpt-4o", "messages": msgs}
    before = GPT_4O.count_request(body)
    out = plan_request(body, Policy(cache=CachePolicy(enabled=False)), GPT_4O, before)
    assert out.tokens_after <= out.budget < before
    assert out.body["messages"][3]["content"] != deep
