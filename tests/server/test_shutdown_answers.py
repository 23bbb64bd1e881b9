"""A request still in flight when the shutdown's grace period ends gets an answer in its
API's shape (503 `server_shutdown`, or the stream's error event and a clean end) and its
usage row, never a bare 500 or a cut connection; the server still exits 0."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import free_port
from tests.fault_upstream import FaultUpstream, read_rows, wait_until
from tests.processes import healthy, serve_command

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "claude-sonnet-4-5", "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
GRACE_S = 2.0


@pytest.fixture
def fault() -> Iterator[FaultUpstream]:
    with FaultUpstream().running() as server:
        yield server


@pytest.fixture
def proxy(
    tmp_path: Path, policies_dir: Path, fault: FaultUpstream
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    command = serve_command(port, policies_dir, fault.url, tmp_path / "usage.jsonl",
                            "--anthropic-upstream", fault.base)  # fmt: skip
    env = {**os.environ, "CONTEXT_PROXY_GRACEFUL_SHUTDOWN_S": str(GRACE_S)}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    assert wait_until(lambda: healthy(url) or process.poll() is not None, 20)
    yield url, process
    fault.release()
    if process.poll() is None:
        process.kill()
    process.communicate(timeout=30)


def in_background(call: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        out["result"] = call()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def stop_while_waiting(fault: FaultUpstream, process: subprocess.Popen[bytes]) -> None:
    """SIGTERM once the upstream holds the request; the server exits 0 after its grace."""
    assert wait_until(lambda: fault.open_count() > 0, 10)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=GRACE_S + 15) == 0


def the_row(tmp_path: Path, request_id: str) -> dict[str, Any]:
    (row,) = [r for r in read_rows(tmp_path / "usage.jsonl") if r["request_id"] == request_id]
    return row


@pytest.mark.parametrize("path,body", [("/v1/chat/completions", CHAT), ("/v1/messages", MESSAGES)])
def test_a_request_waiting_on_the_upstream_gets_a_shaped_503_and_its_row(
    proxy: tuple[str, subprocess.Popen[bytes]],
    fault: FaultUpstream,
    tmp_path: Path,
    path: str,
    body: dict[str, Any],
) -> None:
    url, process = proxy
    fault.mode = "silent"  # the upstream never answers
    thread, out = in_background(lambda: httpx.post(url + path, json=body, timeout=60))
    stop_while_waiting(fault, process)
    thread.join(timeout=10)
    answer: httpx.Response = out["result"]
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"] == "1"
    error = answer.json()
    if path == "/v1/messages":  # Anthropic's shape, which its SDK retries as overloaded
        assert error["type"] == "error" and error["error"]["type"] == "overloaded_error"
    else:
        assert error["error"]["code"] == "server_shutdown"
        assert error["error"]["type"] == "server_error"
    row = the_row(tmp_path, answer.headers["x-request-id"])
    assert (row["status"], row["error"], row["total_tokens"]) == (503, "server_shutdown", 0)


def test_a_stream_cut_by_the_shutdown_ends_with_its_error_event(
    proxy: tuple[str, subprocess.Popen[bytes]], fault: FaultUpstream, tmp_path: Path
) -> None:
    url, process = proxy
    fault.mode = "stream_stall"  # two events, then nothing
    received = bytearray()
    with httpx.stream("POST", url + "/v1/chat/completions", json={**CHAT, "stream": True},
                      timeout=60) as response:  # fmt: skip
        request_id = response.headers["x-request-id"]
        chunks = response.iter_raw()
        received += next(chunks)
        stopper, _ = in_background(lambda: stop_while_waiting(fault, process))
        for chunk in chunks:  # read to its end: a cut connection would raise here
            received += chunk
    stopper.join(timeout=GRACE_S + 20)
    assert process.returncode == 0
    last = received.strip().split(b"\n\n")[-1]
    assert last.startswith(b"data: ")
    assert orjson.loads(last[6:])["error"]["code"] == "server_shutdown"
    row = the_row(tmp_path, request_id)
    assert (row["status"], row["error"]) == (503, "server_shutdown")
