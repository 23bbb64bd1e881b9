"""Client faults: disconnects cancel the upstream call, slow clients block no one, bodies are bounded."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.server.app.app import create_app
from proxy.server.core.settings import Settings
from proxy.server.pipeline import request_body
from tests.conftest import free_port, serve
from tests.fault_upstream import REPLY, Conn, FaultUpstream, usage_rows, wait_until
from tests.processes import healthy, serve_command

SMALL = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
STREAM = dict(SMALL, stream=True)
# How long the upstream may keep a connection after the client went: "promptly".
PROMPT_S = 2.0


class LoopSpy:
    """Wraps the app to learn which event loop serves it (to count its tasks from a test)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.loop: asyncio.AbstractEventLoop | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.loop = asyncio.get_running_loop()
        await self.app(scope, receive, send)

    def task_count(self) -> int:
        async def count() -> int:
            return len(asyncio.all_tasks())

        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(count(), self.loop).result(5)


@dataclass
class InProcess:
    url: str
    port: int
    usage_path: Path
    spy: LoopSpy


@pytest.fixture
def fault() -> Iterator[FaultUpstream]:
    with FaultUpstream().running() as server:
        yield server


@contextmanager
def in_process(
    tmp_path: Path, policies_dir: Path, upstream: str, **overrides: Any
) -> Iterator[InProcess]:
    settings = Settings(
        policies=str(policies_dir),
        upstream=upstream,
        usage_log=str(tmp_path / "usage.jsonl"),
        watch_policies=False,
        **overrides,
    )
    spy = LoopSpy(create_app(settings))
    with serve(spy) as url:
        yield InProcess(url, int(url.rsplit(":", 1)[1]), Path(settings.usage_log), spy)


@pytest.fixture
def proxy(tmp_path: Path, policies_dir: Path, fault: FaultUpstream) -> Iterator[InProcess]:
    (policies_dir / "default.yaml").write_text("upstream: {timeout_s: 30}\n")
    with in_process(tmp_path, policies_dir, fault.url, max_body_mb=0.01) as running:
        yield running
        fault.release()  # connections a failing test left hanging, so shutdown is quick


def raw_request(
    port: int, path: str, body: bytes, mode: str, *, send_body: bool = True, rcvbuf: int = 0
) -> socket.socket:
    """A request on a raw socket, so the test decides when the client goes away;
    `rcvbuf`: a receive buffer this small, set before connecting (the window the
    connection offers is fixed then)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(5)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect(("127.0.0.1", port))
    head = (
        f"POST {path} HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n"
        f"x-fault: {mode}\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + (body if send_body else b""))
    return sock


def upstream_conn(fault: FaultUpstream, count: int) -> Conn:
    assert wait_until(lambda: len(fault.requests) >= count), (
        "the request never reached the upstream"
    )
    return fault.requests[count - 1]


def assert_closed_promptly(conn: Conn, client_left: float) -> None:
    assert wait_until(lambda: conn.peer_closed_at is not None, PROMPT_S + 1), (
        "the proxy kept the upstream request open after the client disconnected"
    )
    assert conn.peer_closed_at is not None and conn.peer_closed_at - client_left < PROMPT_S


def test_disconnect_mid_stream_cancels_the_upstream_request(
    proxy: InProcess, fault: FaultUpstream
) -> None:
    fault.mode = "slow_stream"
    with httpx.stream(
        "POST", proxy.url + "/v1/chat/completions", json=STREAM, timeout=5
    ) as response:
        first = next(response.iter_raw())
        assert first.startswith(b"data: ")
        request_id = response.headers["x-request-id"]
    left = time.monotonic()
    assert_closed_promptly(upstream_conn(fault, 1), left)
    assert wait_until(
        lambda: any(r["request_id"] == request_id for r in usage_rows(proxy.usage_path, 0, 0))
    )
    row = next(r for r in usage_rows(proxy.usage_path) if r["request_id"] == request_id)
    assert (row["status"], row["error"], row["stream"]) == (499, "client_disconnected", True)


def test_many_disconnects_leak_no_tasks_or_connections(
    proxy: InProcess, fault: FaultUpstream
) -> None:
    fault.mode = "ok"
    assert httpx.post(proxy.url + "/v1/chat/completions", json=SMALL).status_code == 200
    assert wait_until(lambda: fault.open_count() == 0)
    baseline = proxy.spy.task_count()
    fault.mode = "slow_stream"
    rounds = 25
    for _ in range(rounds):
        with httpx.stream(
            "POST", proxy.url + "/v1/chat/completions", json=STREAM, timeout=5
        ) as response:
            next(response.iter_raw())
    assert wait_until(lambda: fault.open_count() == 0, PROMPT_S + 1), (
        f"{fault.open_count()} upstream connections left open"
    )
    assert wait_until(lambda: proxy.spy.task_count() <= baseline, 3), (
        f"tasks: {proxy.spy.task_count()} after, {baseline} before"
    )
    rows = usage_rows(proxy.usage_path, rounds + 1)
    assert [r["status"] for r in rows].count(499) == rounds


@pytest.mark.parametrize("body", [STREAM, SMALL], ids=["stream", "plain"])
def test_disconnect_before_upstream_headers_cancels_the_upstream_request(
    proxy: InProcess, fault: FaultUpstream, body: dict[str, Any]
) -> None:
    """A model that is slow to start (long time to first token) and a client that gives up."""
    sock = raw_request(proxy.port, "/v1/chat/completions", orjson.dumps(body), "silent")
    conn = upstream_conn(fault, 1)
    sock.close()
    left = time.monotonic()
    assert_closed_promptly(conn, left)
    rows = usage_rows(proxy.usage_path)
    assert rows and rows[-1]["status"] == 499


def test_slow_reader_does_not_block_other_clients(proxy: InProcess, fault: FaultUpstream) -> None:
    slow = raw_request(
        proxy.port, "/v1/chat/completions", orjson.dumps(STREAM), "big_stream", rcvbuf=4096
    )
    assert slow.recv(1)  # the answer started; then this client stops reading
    conn = upstream_conn(fault, 1)
    with httpx.Client(timeout=5) as client:
        for _ in range(20):
            answer = client.post(
                proxy.url + "/v1/chat/completions", json=SMALL, headers={"x-fault": "ok"}
            )
            assert answer.json()["choices"][0]["message"]["content"] == REPLY
        with client.stream(
            "POST", proxy.url + "/v1/chat/completions", json=STREAM, headers={"x-fault": "ok"}
        ) as r:
            assert r.read().endswith(b"data: [DONE]\n\n")
    assert conn.peer_closed_at is None  # the slow reader's stream is still going, just paused
    slow.close()
    left = time.monotonic()
    assert_closed_promptly(conn, left)


def send_slowly(sock: socket.socket, pieces: int, piece: bytes, gap_s: float) -> tuple[int, bytes]:
    """Send chunked pieces with a pause between; stop as soon as an answer arrives."""
    sock.setblocking(False)
    answer = b""
    for sent in range(pieces):
        with suppress(BlockingIOError, BrokenPipeError, ConnectionResetError):
            sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        time.sleep(gap_s)
        try:
            answer += sock.recv(65536)
        except BlockingIOError:
            continue
        if answer:
            sock.setblocking(True)
            return sent + 1, read_response(sock, answer)
    return pieces, answer


def read_response(sock: socket.socket, got: bytes = b"", timeout: float = 3.0) -> bytes:
    """One whole HTTP answer with a Content-Length body (or what came before EOF/timeout)."""
    sock.settimeout(timeout)
    data = got
    try:
        while True:
            head, sep, rest = data.partition(b"\r\n\r\n")
            if sep:
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                if len(rest) >= length:
                    return data
            chunk = sock.recv(65536)
            if not chunk:
                return data
            data += chunk
    except (TimeoutError, ConnectionResetError):
        return data


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/embeddings"])
def test_huge_body_sent_slowly_is_cut_off_at_the_limit(
    proxy: InProcess, fault: FaultUpstream, path: str
) -> None:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nhost: p\r\ntransfer-encoding: chunked\r\n\r\n".encode()
        + b'5\r\n{"a":\r\n'
    )
    # 1 KiB every 10 ms against a 10 KiB limit: the answer must come long before 200 pieces.
    sent, answer = send_slowly(sock, 200, b" " * 1024, 0.01)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert sent < 50
    assert b"request_too_large" in answer
    assert all(len(c.body) <= 10 * 1024 for c in fault.requests)  # never more than the limit


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/embeddings"])
def test_body_sent_too_slowly_is_cut_off_by_the_read_timeout(
    proxy: InProcess, fault: FaultUpstream, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    monkeypatch.setattr(request_body, "BODY_READ_TIMEOUT_S", 0.5)
    body = orjson.dumps(SMALL)
    sock = raw_request(proxy.port, path, body, "ok", send_body=False)
    sock.sendall(body[:10])  # and the rest never comes
    answer = read_response(sock, timeout=3)  # the patched limit is 0.5 s
    sock.close()
    assert answer, "no answer: a client trickling its body holds the request open"
    status = int(answer.split(b" ", 2)[1])
    assert status in (400, 408) and b"body_timeout" in answer, answer[:300]


def socket_count(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                count += 1
        except OSError:
            continue
    return count


def test_subprocess_proxy_sockets_return_to_baseline_after_disconnects(
    tmp_path: Path, policies_dir: Path, fault: FaultUpstream
) -> None:
    port = free_port()
    process = subprocess.Popen(
        [
            *serve_command(port, policies_dir, fault.url, tmp_path / "usage.jsonl"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        url = f"http://127.0.0.1:{port}"
        assert wait_until(lambda: healthy(url), 20)
        with httpx.Client() as client:  # warm up: one of each kind, then close our side
            assert client.post(url + "/v1/chat/completions", json=SMALL).status_code == 200
            with client.stream("POST", url + "/v1/chat/completions", json=STREAM) as r:
                r.read()
        assert wait_until(lambda: fault.open_count() == 0)
        time.sleep(0.2)
        baseline = socket_count(process.pid)
        fault.mode = "slow_stream"
        for _ in range(30):
            with httpx.stream(
                "POST", url + "/v1/chat/completions", json=STREAM, timeout=5
            ) as response:
                next(response.iter_raw())
        assert wait_until(lambda: fault.open_count() == 0, PROMPT_S + 1)
        assert wait_until(lambda: socket_count(process.pid) <= baseline, 3), (
            f"{socket_count(process.pid)} sockets open, {baseline} before"
        )
    finally:
        process.kill()
        process.wait()
