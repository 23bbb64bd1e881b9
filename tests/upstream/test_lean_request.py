"""LeanRequest: the upstream call's fixed auto-header rule, the same headers as aiohttp's own."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from proxy.upstream.client import Timeouts, Upstream
from proxy.upstream.lean_request import SKIPPED_NAMES, LeanRequest

ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


async def _capture_server(heads: list[list[tuple[str, str]]]) -> asyncio.Server:
    """A local server that records each request's header lines and answers `{}`."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:  # the client closed its connection
                break
            lines = head.decode("latin-1").split("\r\n")[1:-2]
            pairs = [(k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in lines)]
            heads.append(pairs)
            length = next((int(v) for k, v in pairs if k.lower() == "content-length"), 0)
            await reader.readexactly(length)
            writer.write(ANSWER)
            await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


CASES: list[list[tuple[str, str]]] = [
    [],
    [("content-type", "application/json")],
    [("Accept", "text/plain"), ("user-agent", "client/1.0")],
    [("accept-encoding", "br"), ("x-a", "1"), ("x-a", "2")],
]


@pytest.mark.parametrize("headers", CASES)
@pytest.mark.parametrize("body", [b'{"a":1}', None])
def test_same_headers_as_aiohttps_own_request(
    headers: list[tuple[str, str]], body: bytes | None
) -> None:
    async def sent(request_class: Any) -> list[tuple[str, str]]:
        heads: list[list[tuple[str, str]]] = []
        server = await _capture_server(heads)
        port = server.sockets[0].getsockname()[1]
        async with (
            aiohttp.ClientSession(
                skip_auto_headers=SKIPPED_NAMES, request_class=request_class, auto_decompress=False
            ) as session,
            session.post(f"http://127.0.0.1:{port}/x", headers=headers, data=body),
        ):
            pass
        server.close()
        return [pair for pair in heads[0] if pair[0] != "Host"]  # its port differs each time

    async def main() -> None:
        assert await sent(LeanRequest) == await sent(aiohttp.ClientRequest)

    asyncio.run(main())


def test_upstream_session_skips_aiohttps_per_request_copy(monkeypatch: Any) -> None:
    """aiohttp's update_auto_headers (a sorted multidict and a header copy per request) is
    not run for the session's own skip set."""
    calls: list[object] = []
    original = aiohttp.ClientRequest.update_auto_headers

    def counting(self: aiohttp.ClientRequest, skip: Any) -> None:
        calls.append(skip)
        original(self, skip)

    monkeypatch.setattr(aiohttp.ClientRequest, "update_auto_headers", counting)

    async def main() -> list[tuple[str, str]]:
        heads: list[list[tuple[str, str]]] = []
        server = await _capture_server(heads)
        port = server.sockets[0].getsockname()[1]
        upstream = Upstream.open()
        try:
            for _ in range(3):
                answer = await upstream.send(
                    "POST",
                    f"http://127.0.0.1:{port}/v1/chat/completions",
                    [("content-type", "application/json"), ("x-a", "1"), ("x-a", "2")],
                    b"{}",
                    Timeouts(10, 5),
                    streaming=False,
                )
                assert await answer.read() == b"{}"
        finally:
            await upstream.close()
            server.close()
        return heads[-1]

    head = asyncio.run(main())
    assert calls == []
    names = [k.lower() for k, _ in head]
    # Still: no User-Agent, Accept-Encoding or second Content-Type added; Accept is.
    assert "user-agent" not in names and "accept-encoding" not in names
    assert names.count("content-type") == 1 and ("Accept", "*/*") in head
    assert [v for k, v in head if k == "x-a"] == ["1", "2"]
