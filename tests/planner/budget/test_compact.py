"""Compaction of JSON tool results: the same document without its spaces, or nothing."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.planner.budget.compact import compact_json


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
