"""Building Starlette responses from upstream parts, keeping repeated headers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

from starlette.responses import Response, StreamingResponse

from proxy.errors import ProxyError


def _raw(headers: list[tuple[str, str]], extra: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    names = {k for k, _ in raw}
    raw.extend(
        (k.encode("latin-1"), v.encode("latin-1"))
        for k, v in extra.items()
        if k.encode("latin-1") not in names
    )
    return raw


def plain(
    status: int, headers: list[tuple[str, str]], body: bytes, extra: Mapping[str, str] | None = None
) -> Response:
    response = Response(content=body, status_code=status)
    # Keep Starlette's own content-length: the upstream's may describe an encoding we undid.
    length = [(k, v) for k, v in response.raw_headers if k == b"content-length"]
    response.raw_headers = [*length, *_raw(headers, extra or {})]
    return response


def streamed(
    status: int,
    headers: list[tuple[str, str]],
    chunks: AsyncIterator[bytes],
    extra: Mapping[str, str] | None = None,
) -> StreamingResponse:
    response = StreamingResponse(chunks, status_code=status)
    response.raw_headers = _raw(headers, extra or {})
    return response


def error(exc: ProxyError, extra: Mapping[str, str] | None = None) -> Response:
    headers = [("content-type", "application/json")]
    if exc.status == 401:
        headers.append(("www-authenticate", 'Bearer realm="context-proxy"'))
    return plain(exc.status, headers, exc.body(), extra)
