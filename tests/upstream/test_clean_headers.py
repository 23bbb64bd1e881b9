"""clean_headers in one pass: the same headers kept, in order, as the two-pass original."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict
from starlette.datastructures import Headers

from proxy.upstream.client import HOP_BY_HOP, clean_headers


def reference(items: list[tuple[str, str]], drop: frozenset[str]) -> list[tuple[str, str]]:
    """The original two-pass definition."""
    named = {
        token.strip().lower()
        for key, value in items
        if key.lower() == "connection"
        for token in value.split(",")
    }
    return [
        (key, value)
        for key, value in items
        if (low := key.lower()) not in HOP_BY_HOP and low not in named and low not in drop
    ]


CASES = [
    [],
    [("Host", "h"), ("Content-Type", "application/json"), ("X-A", "1"), ("x-a", "2")],
    [("Connection", "keep-alive, X-Secret"), ("x-secret", "s"), ("X-Other", "o")],
    [("connection", "x-one"), ("Connection", " X-Two ,"), ("x-one", "1"), ("x-two", "2")],
    [("Authorization", "Bearer k"), ("cookie", "c"), ("Transfer-Encoding", "chunked")],
]


@pytest.mark.parametrize("items", CASES)
@pytest.mark.parametrize("drop", [frozenset(), frozenset({"authorization", "cookie", "x-a"})])
def test_same_as_the_two_pass_original(items: list[tuple[str, str]], drop: frozenset[str]) -> None:
    expected = reference(items, drop)
    assert clean_headers(CIMultiDict(items), drop) == expected
    raw = [(k.lower().encode(), v.encode()) for k, v in items]
    assert clean_headers(Headers(raw=raw), drop) == reference(
        [(k.lower(), v) for k, v in items], drop
    )
