"""Shutdown of the real `python -m proxy serve`: SIGTERM drains streams, SIGKILL tears no line."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from proxy.usage.ledger import iter_records
from tests.conftest import free_port
from tests.fault_upstream import FaultUpstream, read_rows, wait_until
from tests.processes import healthy, serve_command

STREAM = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": True}
SMALL = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
Launch = Callable[..., tuple[str, subprocess.Popen[bytes]]]


@pytest.fixture
def fault() -> Iterator[FaultUpstream]:
    with FaultUpstream().running() as server:
        yield server


@pytest.fixture
def launch(tmp_path: Path, policies_dir: Path, fault: FaultUpstream) -> Iterator[Launch]:
    """Start `python -m proxy serve` on the fault upstream; all share one usage log."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(grace_s: float = 30.0) -> tuple[str, subprocess.Popen[bytes]]:
        port = free_port()
        process = subprocess.Popen(
            [
                *serve_command(port, policies_dir, fault.url, tmp_path / "usage.jsonl"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=Path(__file__).resolve().parents[2],
            env={**os.environ, "CONTEXT_PROXY_GRACEFUL_SHUTDOWN_S": str(grace_s)},
        )
        processes.append(process)
        url = f"http://127.0.0.1:{port}"
        assert wait_until(lambda: healthy(url) or process.poll() is not None, 20)
        assert process.poll() is None, "the proxy exited at start"
        return url, process

    yield start
    fault.release()
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_sigterm_lets_a_stream_in_flight_finish(
    launch: Launch, fault: FaultUpstream, tmp_path: Path
) -> None:
    url, process = launch()
    fault.mode, fault.events, fault.gap_s = "slow_stream", 20, 0.05  # about a second of stream
    with httpx.stream("POST", url + "/v1/chat/completions", json=STREAM, timeout=10) as response:
        chunks = response.iter_raw()
        first = next(chunks)
        process.send_signal(signal.SIGTERM)
        rest = b"".join(chunks)
        request_id = response.headers["x-request-id"]
    body = first + rest
    assert body.endswith(b"data: [DONE]\n\n")
    assert body.count(b'"content"') == 20
    assert process.wait(timeout=10) == 0
    rows = [r for r in read_rows(tmp_path / "usage.jsonl") if r["request_id"] == request_id]
    assert len(rows) == 1
    assert (rows[0]["status"], rows[0]["error"], rows[0]["usage_source"]) == (200, None, "upstream")


def test_sigterm_refuses_new_connections_while_draining(
    launch: Launch, fault: FaultUpstream
) -> None:
    url, process = launch()
    fault.mode, fault.events, fault.gap_s = "slow_stream", 20, 0.05
    with httpx.stream("POST", url + "/v1/chat/completions", json=STREAM, timeout=10) as response:
        chunks = response.iter_raw()
        next(chunks)
        process.send_signal(signal.SIGTERM)
        assert wait_until(lambda: not healthy(url), 2)
        assert b"".join(chunks).endswith(b"data: [DONE]\n\n")
    assert process.wait(timeout=10) == 0


def test_sigterm_grace_period_bounds_an_endless_stream(
    launch: Launch, fault: FaultUpstream, tmp_path: Path
) -> None:
    url, process = launch(grace_s=1)
    fault.mode, fault.events, fault.gap_s = "slow_stream", 100_000, 0.05
    received = bytearray()
    with httpx.stream("POST", url + "/v1/chat/completions", json=STREAM, timeout=10) as response:
        request_id = response.headers["x-request-id"]
        chunks = response.iter_raw()
        received += next(chunks)
        process.send_signal(signal.SIGTERM)
        try:
            for chunk in chunks:
                received += chunk
        except httpx.HTTPError:
            pass  # the proxy had to cut it: the grace period is over
    assert process.wait(timeout=8) == 0
    # The upstream call was cancelled too, and the cut request still has its usage row.
    assert wait_until(lambda: fault.open_count() == 0, 2)
    rows = [r for r in read_rows(tmp_path / "usage.jsonl") if r["request_id"] == request_id]
    assert len(rows) == 1 and rows[0]["status"] != 200
    # Cut by the shutdown, not by the client: the row says so.
    assert rows[0]["error"] == "server_shutdown" and rows[0]["status"] == 503


def read_lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines() if path.exists() else []


def load(url: str, stop: threading.Event) -> None:
    with httpx.Client(timeout=5) as client:
        while not stop.is_set():
            try:
                client.post(url + "/v1/chat/completions", json=SMALL)
                with client.stream("POST", url + "/v1/chat/completions", json=STREAM) as r:
                    r.read()
            except httpx.HTTPError:
                return  # the proxy was killed


def test_sigkill_under_load_leaves_only_whole_lines(
    launch: Launch, fault: FaultUpstream, tmp_path: Path
) -> None:
    log = tmp_path / "usage.jsonl"
    rng = random.Random()
    kills = 3
    for _ in range(kills):
        url, process = launch()
        lines_before = len(read_lines(log))
        stop = threading.Event()
        threads = [threading.Thread(target=load, args=(url, stop)) for _ in range(4)]
        for thread in threads:
            thread.start()
        # Kill at a random moment once the load is really flowing (the first request loads
        # the tokenizer, which takes a while on a busy machine).
        assert wait_until(lambda: len(read_lines(log)) >= lines_before + 10, 8)  # noqa: B023
        time.sleep(rng.uniform(0.0, 0.3))
        process.send_signal(signal.SIGKILL)
        process.wait()
        stop.set()
        for thread in threads:
            thread.join(10)
    # A restart on the same log repairs a torn end; the log keeps growing after it.
    before = log.read_bytes()
    url, process = launch()
    assert httpx.post(url + "/v1/chat/completions", json=SMALL, timeout=5).status_code == 200
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0

    raw = log.read_bytes()
    assert raw.startswith(before) and raw.endswith(b"\n")
    lines = raw.split(b"\n")[:-1]
    good, bad = [], []
    for line in lines:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            bad.append(line)
            continue
        assert isinstance(record, dict)
        good.append(record)
    assert len(good) > 20, "the load produced too few requests to mean anything"
    assert len(bad) <= kills, bad  # at most one torn last line per kill
    for line in bad:
        assert line.count(b'{"ts":') <= 1, f"two records merged on one line: {line[:200]!r}"
        assert line.startswith(b'{"ts":'), f"a line that starts mid-record: {line[:200]!r}"
    assert [r["request_id"] for r in iter_records(str(log))] == [r["request_id"] for r in good]
    assert all(r["status"] == 200 for r in good)
