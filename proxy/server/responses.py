"""Building Starlette responses from upstream parts, keeping repeated headers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping, Sequence

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from proxy.errors import ProxyError

_BAD_NAME = frozenset(' :"(),/;<=>?@[\\]{}')
# Connection-level headers are never relayed (RFC 9110 7.6.1); content-length is ours to set.
HOP_BY_HOP_OUT = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


Extra = Mapping[str, str] | Sequence[tuple[bytes, bytes]]


def _raw(headers: list[tuple[str, str]], extra: Extra) -> list[tuple[bytes, bytes]]:
    """The upstream's headers (checked), then the proxy's own `extra` ones it lacks:
    given as a mapping they are checked too; as (bytes, bytes) pairs they are ours,
    built valid (Exchange.context_headers), and go out as they are."""
    raw = [pair for k, v in headers if (pair := _header(k, v)) is not None]
    names = {k for k, _ in raw}
    if isinstance(extra, Mapping):
        for k, v in extra.items():
            pair = _header(k, v)
            if pair is not None and pair[0] not in names:
                raw.append(pair)
    elif names:
        raw += [pair for pair in extra if pair[0] not in names]
    else:
        raw += extra
    return raw


def header_value(value: str) -> bytes:
    """`value` as bytes a client may receive: anything but printable ASCII percent-encoded."""
    if not (value.isascii() and value.isprintable()):
        data = value.encode("utf-8", "surrogateescape")
        value = "".join(chr(b) if 0x20 <= b < 0x7F else f"%{b:02X}" for b in data)
    return value.encode("ascii")


def _header(name: str, value: str) -> tuple[bytes, bytes] | None:
    """A header as bytes the client may receive, or None to drop it.

    An upstream's header value may be anything its parser let through (UTF-8, CR, NUL):
    such a value is percent-encoded rather than failing the whole answer with a 500, and a
    name that is not a plain token, or a hop-by-hop one, is dropped.
    """
    low = name.lower()
    # Names arrive parsed as tokens; only cheap checks for what would break the head.
    if low in HOP_BY_HOP_OUT or not (low.isascii() and low.isprintable()) or _BAD_NAME & set(low):
        return None
    return low.encode("ascii"), header_value(value)


class Plain(Response):
    """A whole answer, sent at once.

    `keep` holds what the request parsed and planned until the answer has been sent: for a
    600-message conversation, freeing those objects takes about 0.3 ms, better spent after
    the client has its answer than before.
    """

    keep: object = None

    def __init__(self, status: int, raw_headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status_code = status
        self.body = body
        self.background = None
        self.raw_headers = raw_headers


def plain(
    status: int, headers: list[tuple[str, str]], body: bytes, extra: Extra | None = None
) -> Plain:
    raw = _raw(headers, extra or {})
    # Our own content-length, never the upstream's: it may describe an encoding we undid.
    # None on answers that must not have a body (as Starlette's own Response does).
    if not (status < 200 or status in (204, 304)):
        raw.insert(0, (b"content-length", b"%d" % len(body)))
    return Plain(status, raw, body)


class Relayed(Response):
    """A streamed answer, relayed piece by piece as the upstream sends it.

    Starlette's StreamingResponse opens an anyio task group per response to notice a client
    leaving; here one listener task does it, cancelling the relay at once, so the upstream
    request is closed promptly. The relay generator is always closed before this returns:
    its cleanup (usage row, upstream connection) runs on every path.
    """

    def __init__(
        self, status: int, raw_headers: list[tuple[bytes, bytes]], chunks: AsyncGenerator[bytes]
    ) -> None:
        self.status_code = status
        self.raw_headers = raw_headers
        self.background = None
        self._chunks = chunks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        gone = False

        async def listen() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True
            task.cancel()

        listener = asyncio.ensure_future(listen())
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            async for chunk in self._chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not gone:
                raise
            task.uncancel()  # the client left: nothing more to send, nothing went wrong here
        finally:
            listener.cancel()
            await self._chunks.aclose()


def streamed(
    status: int,
    headers: list[tuple[str, str]],
    chunks: AsyncGenerator[bytes],
    extra: Extra | None = None,
) -> Relayed:
    return Relayed(status, _raw(headers, extra or {}), chunks)


def error(exc: ProxyError, extra: Extra | None = None) -> Plain:
    headers = [("content-type", "application/json")]
    if exc.status == 401:
        headers.append(("www-authenticate", 'Bearer realm="context-proxy"'))
    return plain(exc.status, headers, exc.body(), extra)


async def internal_error(_request: object, _exc: Exception) -> Plain:
    """Starlette's handler for an exception nothing else caught: a 500 in OpenAI's shape.

    Neither the exception's text nor its type goes out: either could carry request data.
    """
    return error(ProxyError("The proxy failed to handle the request.", code="internal_error"))
