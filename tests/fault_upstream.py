"""A raw, fault-injecting upstream (asyncio TCP on loopback) and small waiting helpers for tests.

Every connection is answered by one *mode*: the server's `mode`, or the request's `x-fault`
header (the proxy forwards it). Each connection is recorded with its request and, for the
modes that hang, the moment the peer (the proxy) closed it — which is how tests see that a
client's disconnect cancelled the upstream request. Answers always carry `connection: close`
so the proxy never pools these connections and socket counts stay easy to read.

Modes: ok (JSON, or SSE when the body says stream), silent (never answers), stall_headers
(headers then nothing), stream_stall (two events then nothing), slow_stream (an event every
`gap_s`, `events` of them), big_stream (many large events as fast as possible), stream_reset
and plain_reset (part of the answer then a TCP reset), garbage (not HTTP), html_500,
invalid_json, 429 (with Retry-After), 503, flaky (503 for the first `fail_first` requests,
then ok), redirect (302 to `redirect_to`), endless_plain / endless_stream / endless_event (a JSON
body, SSE events, or one SSE event that never ends, up to `endless_bytes`), bad_headers (a
header value that is not Latin-1, and a hop-by-hop one).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

RETRY_AFTER = "17"
ERROR_429 = b'{"error":{"message":"slow down","type":"rate_limit","param":null,"code":"rate"}}'
ERROR_503 = b'{"error":{"message":"overloaded","type":"server_error","param":null,"code":null}}'
HTML_500 = b"<html><body><h1>500 Internal Server Error</h1>nginx</body></html>"
REPLY = "fault upstream says hi"


@dataclass
class Conn:
    """One accepted connection: its request, and when and how it ended."""

    opened: float = field(default_factory=time.monotonic)
    method: str = ""
    target: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    mode: str = ""
    peer_closed_at: float | None = None  # the proxy closed or reset its side
    done: bool = False  # the handler is over (either side closed)

    def json(self) -> Any:
        return orjson.loads(self.body)


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, step: float = 0.01) -> bool:
    """Poll `predicate` until true or `timeout` seconds passed; the last value."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def usage_rows(path: Path, at_least: int = 1, timeout: float = 5.0) -> list[dict[str, Any]]:
    """The usage log's rows, waiting briefly: a writer thread adds them off the request path."""
    wait_until(lambda: len(read_rows(path)) >= at_least, timeout)
    return read_rows(path)


class FaultUpstream:
    """The server; start it with `running()`; settings may change between requests."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.endless_bytes = 256 * 1024 * 1024  # how long the endless modes go on
        self.fail_first = 0
        self.events = 1000
        self.gap_s = 0.05
        self.redirect_to = "http://127.0.0.1:9/steal"
        self.conns: list[Conn] = []
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._flaky_seen = 0
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.base + "/v1"

    def reset(self, mode: str = "ok") -> None:
        self.mode, self.fail_first, self._flaky_seen = mode, 0, 0
        self.events, self.gap_s = 1000, 0.05
        self.conns = []

    @property
    def requests(self) -> list[Conn]:
        """Connections that carried a whole request."""
        return [c for c in self.conns if c.method]

    def open_count(self) -> int:
        return sum(1 for c in self.conns if not c.done)

    def release(self) -> None:
        """Reset every open connection: lets a proxy that never let go shut down at once."""
        if self._loop is not None and not self._loop.is_closed():

            def abort_all() -> None:
                for writer in list(self._writers):
                    writer.transport.abort()

            self._loop.call_soon_threadsafe(abort_all)

    @contextmanager
    def running(self) -> Iterator[FaultUpstream]:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="fault-upstream", daemon=True)
        thread.start()
        self._loop = loop
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0), loop
        ).result(5)
        self.port = self._server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(5)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
            loop.close()

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Conn()
        self.conns.append(conn)
        self._writers.add(writer)
        try:
            if await _read_request(reader, conn):
                conn.mode = conn.headers.get("x-fault", self.mode)
                watch = asyncio.ensure_future(_watch_peer(reader, conn))
                try:
                    await self._answer(conn, writer, watch)
                finally:
                    watch.cancel()
            else:
                conn.peer_closed_at = time.monotonic()
        except (ConnectionError, asyncio.IncompleteReadError):
            conn.peer_closed_at = conn.peer_closed_at or time.monotonic()
        finally:
            conn.done = True
            self._writers.discard(writer)
            writer.close()

    async def _answer(
        self, conn: Conn, writer: asyncio.StreamWriter, watch: asyncio.Future[None]
    ) -> None:
        mode = conn.mode
        if mode == "flaky":
            self._flaky_seen += 1
            mode = "503" if self._flaky_seen <= self.fail_first else "ok"
        stream = _wants_stream(conn.body)
        if mode == "ok":
            if stream:
                await _sse(writer, _events(conn, 3), gap_s=0.0, finish=True)
            else:
                writer.write(_response(200, "application/json", _completion(conn)))
        elif mode == "silent":
            await watch
        elif mode == "stall_headers":
            writer.write(_head(200, "text/event-stream" if stream else "application/json", 500))
            await writer.drain()
            await watch
        elif mode == "stream_stall":
            await _sse(writer, _events(conn, 2), gap_s=0.0, finish=False)
            await watch
        elif mode in ("slow_stream", "big_stream"):
            big = mode == "big_stream"
            count = self.events if not big else 4000
            done = asyncio.ensure_future(
                _sse(
                    writer,
                    _events(conn, count, pad=4096 if big else 0),
                    self.gap_s if not big else 0.0,
                    True,
                )
            )
            await asyncio.wait([done, watch], return_when=asyncio.FIRST_COMPLETED)
            done.cancel()
        elif mode == "stream_reset":
            await _sse(writer, _events(conn, 2), gap_s=0.0, finish=False)
            await asyncio.sleep(0.05)
            _reset(writer)
        elif mode == "plain_reset":
            writer.write(_head(200, "application/json", 1000) + b'{"id": "chatcmpl-x", "choi')
            await writer.drain()
            await asyncio.sleep(0.05)
            _reset(writer)
        elif mode == "garbage":
            writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\x00\xff\xfe this is not HTTP at all\r\n\r\n")
        elif mode == "html_500":
            writer.write(_response(500, "text/html", HTML_500))
        elif mode == "invalid_json":
            writer.write(_response(200, "application/json", b'{"id": "chatcmpl-x", "choices": [tr'))
        elif mode == "429":
            writer.write(
                _response(429, "application/json", ERROR_429, (("retry-after", RETRY_AFTER),))
            )
        elif mode == "503":
            writer.write(_response(503, "application/json", ERROR_503))
        elif mode in ("endless_plain", "endless_stream", "endless_event"):
            endless = asyncio.ensure_future(_endless(writer, mode, self.endless_bytes))
            await asyncio.wait([endless, watch], return_when=asyncio.FIRST_COMPLETED)
            endless.cancel()
        elif mode == "bad_headers":
            head = _head(200, "application/json", len(_completion(conn)))
            odd = "x-odd: caf\u00e9 \u2603 \U0001f600\r\nx-fine: yes\r\nkeep-alive: timeout=5\r\n"
            writer.write(head[:-2] + odd.encode() + b"\r\n" + _completion(conn))
        elif mode == "redirect":
            writer.write(_response(302, "text/plain", b"moved", (("location", self.redirect_to),)))
        else:
            writer.write(_response(500, "text/plain", f"unknown fault mode {mode}".encode()))
        if not writer.is_closing():
            await writer.drain()


async def _read_request(reader: asyncio.StreamReader, conn: Conn) -> bool:
    """Parse one request (Content-Length or chunked body); False if the peer sent none."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        return False
    lines = head.decode("latin-1").split("\r\n")
    conn.method, conn.target, _ = lines[0].split(" ", 2)
    for line in lines[1:]:
        if ":" in line:
            key, value = line.split(":", 1)
            conn.headers[key.strip().lower()] = value.strip()
    if conn.headers.get("transfer-encoding", "").lower() == "chunked":
        parts: list[bytes] = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        conn.body = b"".join(parts)
    else:
        conn.body = await reader.readexactly(int(conn.headers.get("content-length", "0")))
    return True


async def _watch_peer(reader: asyncio.StreamReader, conn: Conn) -> None:
    """Returns when the peer closes or resets its side (after the request, EOF means gone)."""
    try:
        while await reader.read(65536):
            pass
    except ConnectionError:
        pass
    conn.peer_closed_at = conn.peer_closed_at or time.monotonic()


def _wants_stream(body: bytes) -> bool:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(parsed, dict) and parsed.get("stream") is True


def _head(
    status: int, content_type: str, length: int | None, extra: tuple[tuple[str, str], ...] = ()
) -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"content-type: {content_type}", "connection: close"]
    lines.append(
        f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
    )
    lines += [f"{k}: {v}" for k, v in extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _response(
    status: int, content_type: str, body: bytes, extra: tuple[tuple[str, str], ...] = ()
) -> bytes:
    return _head(status, content_type, len(body), extra) + body


def _completion(conn: Conn) -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-fault",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": REPLY},
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
            "path": conn.target,
        }
    )


def _events(conn: Conn, count: int, pad: int = 0) -> Iterator[bytes]:
    filler = "x" * pad
    for i in range(count):
        chunk = {
            "id": "chatcmpl-fault",
            "object": "chat.completion.chunk",
            "choices": [
                {"index": 0, "delta": {"content": f"w{i} {filler}"}, "finish_reason": None}
            ],
        }
        yield b"data: " + orjson.dumps(chunk) + b"\n\n"


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def _sse(
    writer: asyncio.StreamWriter, events: Iterator[bytes], gap_s: float, finish: bool
) -> None:
    writer.write(_head(200, "text/event-stream", None))
    for event in events:
        writer.write(_chunk(event))
        await writer.drain()
        if gap_s:
            await asyncio.sleep(gap_s)
    if finish:
        usage = {
            "id": "chatcmpl-fault",
            "choices": [],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
        }
        writer.write(_chunk(b"data: " + orjson.dumps(usage) + b"\n\n"))
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()


async def _endless(writer: asyncio.StreamWriter, mode: str, limit: int) -> None:
    """An answer that goes on and on (up to `limit` bytes, so the test ends by itself)."""
    stream = mode != "endless_plain"
    writer.write(_head(200, "text/event-stream" if stream else "application/json", None))
    if mode == "endless_event":  # one event that never ends: no blank line, ever
        writer.write(_chunk(b'data: {"choices": [{"delta": {"content": "'))
    piece = {
        "endless_plain": b"[" + b"1," * 32767 + b"1]",
        "endless_stream": b"".join(_events(Conn(), 64, pad=1000)),
        "endless_event": b"y" * 65536,
    }[mode]
    sent = 0
    while sent < limit:
        writer.write(_chunk(piece))
        sent += len(piece)
        await writer.drain()
    writer.write(b"0\r\n\r\n")
    await writer.drain()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Abort with SO_LINGER 0, so the peer gets a TCP RST rather than a clean FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
