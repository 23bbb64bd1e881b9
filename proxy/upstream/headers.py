"""Header hygiene: what of a client's headers goes upstream, and of an upstream's to the client."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

# Headers that describe one connection, not the message; never forwarded (RFC 9110 7.6.1),
# plus the ones aiohttp or the receiving server recomputes.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_HOP_BY_HOP_RAW = frozenset(name.encode("ascii") for name in HOP_BY_HOP)
# A header name is a token (RFC 9110 5.6.2); checked after lowercasing.
_NOT_TOKEN = re.compile(rb"[^!#$%&'*+\-.^_`|~0-9a-z]")
_NOT_PRINTABLE = re.compile(rb"[^\x20-\x7e]")


@functools.lru_cache(maxsize=16)
def _skipped(drop: frozenset[str]) -> frozenset[bytes]:
    """HOP_BY_HOP and `drop`, as the lowercase bytes names ASGI servers hand over."""
    return _HOP_BY_HOP_RAW | {name.lower().encode("latin-1") for name in drop}


def _connection_tokens(value: bytes) -> set[bytes]:
    return {token.strip().lower() for token in value.split(b",")}


def clean_headers(
    raw: Iterable[tuple[bytes, bytes]], drop: frozenset[str] = frozenset()
) -> list[tuple[str, str]]:
    """A client's headers (an ASGI scope's pairs) to send upstream: minus hop-by-hop ones,
    those named by `Connection` and `drop`, keeping repeats."""
    skipped = _skipped(drop)
    kept: list[tuple[str, str]] = []
    named: set[bytes] | None = None
    for key, value in raw:
        low = key.lower()
        if low in skipped:
            if low == b"connection":
                tokens = _connection_tokens(value)
                named = tokens if named is None else named | tokens
            continue
        kept.append((key.decode("latin-1"), value.decode("latin-1")))
    if named is None:
        return kept
    return [(k, v) for k, v in kept if k.lower().encode("latin-1") not in named]


def percent_encoded(value: bytes) -> bytes:
    """`value` with every byte outside printable ASCII percent-encoded."""
    if _NOT_PRINTABLE.search(value) is None:
        return value
    return "".join(chr(b) if 0x20 <= b < 0x7F else f"%{b:02X}" for b in value).encode("ascii")


# Headers each server sets for itself: the proxy's server writes its own `date`, and the
# upstream's `server` names a host the client did not call (two `date` headers otherwise).
_SERVERS_OWN = frozenset({b"date", b"server"})


def relayable_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """An upstream answer's headers (as received) for the client: names lowercased; hop-by-hop
    ones, those `Connection` names and names that are not tokens dropped; a value may be
    anything the upstream's parser let through (UTF-8, CR, NUL), so bytes outside printable
    ASCII are percent-encoded rather than failing the whole answer."""
    # clean_headers' walk, written out again: a shared one would build (name, key, value)
    # triples and a second list, ~1 µs of every request (tests/bench/README.md).
    kept: list[tuple[bytes, bytes]] = []
    named: set[bytes] | None = None
    for key, value in raw:
        low = key.lower()
        if low in _HOP_BY_HOP_RAW:
            if low == b"connection":
                tokens = _connection_tokens(value)
                named = tokens if named is None else named | tokens
            continue
        if _NOT_TOKEN.search(low) is None and low not in _SERVERS_OWN:
            kept.append((low, percent_encoded(value)))
    if named is None:
        return kept
    return [(k, v) for k, v in kept if k not in named]
