"""Header hygiene in one pass: clean_headers (a client's, to the upstream) keeps the same
headers, in order, as the two-pass original; relayable_headers (an upstream's, to the client)
drops what must not be relayed and encodes what a client must not receive."""

from __future__ import annotations

import pytest

from proxy.upstream.headers import HOP_BY_HOP, clean_headers, relayable_headers


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
    as_sent = [(k.encode(), v.encode()) for k, v in items]
    assert clean_headers(as_sent, drop) == reference(items, drop)
    lowered = [(k.lower().encode(), v.encode()) for k, v in items]  # as ASGI servers give them
    assert clean_headers(lowered, drop) == reference([(k.lower(), v) for k, v in items], drop)


@pytest.mark.parametrize("items", CASES)
def test_relayable_keeps_what_the_original_keeps_lowercased(items: list[tuple[str, str]]) -> None:
    expected = [(k.lower().encode(), v.encode()) for k, v in reference(items, frozenset())]
    assert relayable_headers([(k.encode(), v.encode()) for k, v in items]) == expected


def test_relayable_drops_bad_names_and_encodes_bad_values() -> None:
    raw = [
        (b"X-Odd", "caf\u00e9 \u2603".encode()),
        (b"x-ctl", b"a\tb\x00c\x7f"),
        (b"bad name", b"1"),
        (b"x:colon", b"1"),
        (b"x-fine", b"yes"),
        (b"Keep-Alive", b"timeout=5"),
        (b"X-Snowman\xe2\x98\x83", b"1"),
    ]
    assert relayable_headers(raw) == [
        (b"x-odd", b"caf%C3%A9 %E2%98%83"),
        (b"x-ctl", b"a%09b%00c%7F"),
        (b"x-fine", b"yes"),
    ]
