"""Slow and numerous clients: request heads have a deadline, open connections a cap."""

from __future__ import annotations

import pickle
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress

import httpx
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from proxy.server.app.connection_limits import uvicorn_options
from proxy.server.core.settings import Settings
from tests.conftest import serve


async def hello(_request: object) -> PlainTextResponse:
    return PlainTextResponse("hello")


APP = Starlette(routes=[Route("/", hello)])


@contextmanager
def limited(head: float, idle: float, most: int) -> Iterator[tuple[str, int]]:
    settings = Settings(head_timeout_s=head, idle_timeout_s=idle, max_connections=most)
    with serve(APP, **uvicorn_options(settings)) as url:
        yield url, int(url.rsplit(":", 1)[1])


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """How long until the server closed `sock` (EOF or reset), reading what it sends; None if not."""
    started = time.monotonic()
    sock.settimeout(0.05)
    while time.monotonic() - started < seconds:
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - started
        except TimeoutError:
            continue
        except ConnectionError:
            return time.monotonic() - started
    return None


def connect(port: int, stack: ExitStack, send: bytes = b"") -> socket.socket:
    sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5))
    if send:
        sock.sendall(send)
    return sock


def read_answer(sock: socket.socket) -> bytes:
    """One small answer: headers and body may come in separate reads."""
    sock.settimeout(5)
    data = b""
    while not data.endswith(b"hello"):
        piece = sock.recv(65536)
        if not piece:
            break
        data += piece
    return data


HALF_HEAD = b"GET / HTTP/1.1\r\nhost: x\r\nx-slow: "


def test_half_sent_heads_are_closed_after_the_head_timeout() -> None:
    with limited(head=0.5, idle=30, most=1000) as (url, port), ExitStack() as stack:
        half = [connect(port, stack, HALF_HEAD) for _ in range(40)]
        silent = [connect(port, stack) for _ in range(40)]
        # Meanwhile a normal request is served.
        assert httpx.get(url + "/", timeout=5).text == "hello"
        started = time.monotonic()
        for sock in half + silent:
            left = 5.0 - (time.monotonic() - started)
            assert closed_within(sock, max(left, 0.1)) is not None, "a slow head was kept open"
        assert time.monotonic() - started < 5.0
        assert httpx.get(url + "/", timeout=5).text == "hello"


def test_head_timeout_restarts_for_each_request_on_a_kept_alive_connection() -> None:
    with limited(head=0.5, idle=30, most=1000) as (_url, port), ExitStack() as stack:
        sock = connect(port, stack, b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        assert b"hello" in read_answer(sock)
        sock.sendall(HALF_HEAD)  # the next request's head, never finished
        took = closed_within(sock, 5.0)
        assert took is not None and took < 3.0  # idle timeout is 30 s: the head timer closed it


def test_idle_keep_alive_connection_closes_after_idle_timeout() -> None:
    with limited(head=30, idle=0.5, most=1000) as (_url, port), ExitStack() as stack:
        sock = connect(port, stack, b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        assert b"hello" in read_answer(sock)
        took = closed_within(sock, 5.0)
        assert took is not None and took < 3.0


def test_connections_past_the_cap_are_closed_at_once() -> None:
    with limited(head=30, idle=30, most=20) as (url, port), ExitStack() as stack:
        held = [connect(port, stack) for _ in range(20)]
        time.sleep(0.2)  # let the server accept them all
        extra = [connect(port, stack) for _ in range(5)]
        for sock in extra:
            took = closed_within(sock, 2.0)
            assert took is not None and took < 1.0, "a connection past the cap was kept"
        for sock in held:  # the ones already served stay open
            sock.setblocking(False)
            with suppress(BlockingIOError):
                assert sock.recv(1) != b""
        held[0].close()
        time.sleep(0.2)
        assert httpx.get(url + "/", timeout=5).text == "hello"


def test_options_reach_worker_processes() -> None:
    # --workers N hands uvicorn's config to spawned processes by pickling it.
    options = uvicorn_options(Settings(head_timeout_s=1.5, max_connections=7, idle_timeout_s=2))
    protocol = pickle.loads(pickle.dumps(options["http"]))
    assert protocol.keywords == {"head_timeout_s": 1.5, "max_connections": 7}
    assert options["timeout_keep_alive"] == 2
