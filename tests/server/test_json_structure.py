"""The structure count taken of a body's bytes before it is parsed (json_structure.py):
exactly the objects, arrays and commas the parser will meet, whatever strings, escapes
and chunk edges lie in between; and the density limits it serves (body_limits.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.server.pipeline import json_structure
from proxy.server.pipeline.body_limits import BYTES_PER_VALUE, check_density
from proxy.server.pipeline.json_structure import structure_counts

TRICKY = st.text(alphabet='"\\{[,]}:ab é\n', max_size=12)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | TRICKY,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(TRICKY, inner, max_size=5),
    max_leaves=40,
)


def parsed_counts(value: Any) -> tuple[int, int]:
    """What the parser builds: every object and array, and a comma between each two of
    their members."""
    containers = commas = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict | list):
            containers += 1
            commas += max(0, len(item) - 1)
            stack.extend(item.values() if isinstance(item, dict) else item)
    return containers, commas


@settings(max_examples=400, deadline=None)
@given(JSON, st.integers(min_value=1, max_value=9))
def test_counts_match_the_parsed_value_at_any_chunk_size(value: Any, chunk: int) -> None:
    raw = orjson.dumps(value)
    original = json_structure.CHUNK
    json_structure.CHUNK = chunk  # chunk edges inside strings and backslash runs
    try:
        assert structure_counts(raw) == parsed_counts(orjson.loads(raw))
    finally:
        json_structure.CHUNK = original


def test_a_big_body_counts_across_megabyte_chunks() -> None:
    code = 'x = {"a": [1, 2]}  # \\" {[,' * 100_000  # escapes and structure inside a string
    value = {"m": [code, {"k": [1, 2, 3]}] * 3}
    raw = orjson.dumps(value)
    assert len(raw) > 3 * json_structure.CHUNK
    assert structure_counts(raw) == parsed_counts(value)


@pytest.mark.parametrize("value", [b'"a"', b"1", b"[]"])
def test_a_body_of_countless_tiny_values_is_refused(value: bytes) -> None:
    """31 MB of one-character strings parsed to 710 MB and held the event loop 480 ms."""
    values = b",".join([value] * 400_000)
    raw = b'{"model":"m","x":[' + values + b'],"messages":[{"role":"user","content":"hi"}]}'
    with pytest.raises(Exception, match=r"values|objects"):
        check_density(raw)


def test_values_at_the_limits_density_pass() -> None:
    pad = "x" * (BYTES_PER_VALUE - 3)  # `"<pad>",` is BYTES_PER_VALUE bytes
    raw = orjson.dumps({"model": "m", "x": [pad] * 400_000})
    check_density(raw)
