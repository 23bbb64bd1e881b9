"""Building Starlette responses from upstream parts, keeping repeated headers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from proxy.errors import ProxyError
from proxy.upstream import percent_encoded

Headers = Sequence[tuple[bytes, bytes]]
JSON: Headers = ((b"content-type", b"application/json"),)
_RATE = b"x-ratelimit-"


def _raw(headers: Headers, extra: Headers) -> list[tuple[bytes, bytes]]:
    """The upstream's headers (made relayable by the upstream client), then the proxy's own
    `extra` ones it lacks (built valid: Exchange.context_headers). The team's own rate
    limits (`x-ratelimit-*`, when its policy sets any) replace the upstream account's."""
    raw = list(headers)
    if not raw:
        raw += extra
    elif extra:
        if any(k.startswith(_RATE) for k, _ in extra):
            raw = [pair for pair in raw if not pair[0].startswith(_RATE)]
        names = {k for k, _ in raw}
        raw += [pair for pair in extra if pair[0] not in names]
    return raw


def header_value(value: str) -> bytes:
    """`value` as bytes a client may receive: anything but printable ASCII percent-encoded."""
    if value.isascii() and value.isprintable():
        return value.encode("ascii")
    return percent_encoded(value.encode("utf-8", "surrogateescape"))


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


def plain(status: int, headers: Headers, body: bytes, extra: Headers = ()) -> Plain:
    raw = _raw(headers, extra)
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
    status: int, headers: Headers, chunks: AsyncGenerator[bytes], extra: Headers = ()
) -> Relayed:
    return Relayed(status, _raw(headers, extra), chunks)


_UNAUTHORIZED = (*JSON, (b"www-authenticate", b'Bearer realm="context-proxy"'))


def error(exc: ProxyError, extra: Headers = ()) -> Plain:
    own = exc.headers()
    if own:  # the error's own headers win over the request's of the same name
        names = {k for k, _ in own}
        extra = (*own, *(pair for pair in extra if pair[0] not in names))
    return plain(exc.status, _UNAUTHORIZED if exc.status == 401 else JSON, exc.body(), extra)


async def internal_error(_request: object, _exc: Exception) -> Plain:
    """Starlette's handler for an exception nothing else caught: a 500 in OpenAI's shape.

    Neither the exception's text nor its type goes out: either could carry request data.
    """
    return error(ProxyError("The proxy failed to handle the request.", code="internal_error"))
