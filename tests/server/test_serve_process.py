"""The real command: `python -m proxy serve` in a subprocess, reloads, graceful SIGTERM, workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from proxy.policy.model import hash_key
from tests.conftest import free_port
from tests.fake_upstream import FakeUpstream
from tests.processes import serve_command, wait_ready

SMALL = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def launch(tmp_path: Path, upstream_url: str) -> Iterator[object]:
    processes: list[subprocess.Popen[bytes]] = []

    def start(policies: Path, *extra: str) -> tuple[str, subprocess.Popen[bytes]]:
        port = free_port()
        cmd = [
            *serve_command(port, policies, upstream_url, tmp_path / "usage.jsonl"),
            *extra,
        ]
        process = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=Path(__file__).resolve().parents[2],
        )
        processes.append(process)
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, process)
        return url, process

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_sighup_and_file_changes_reload_and_bad_sets_are_refused(
    launch: object, tmp_path: Path, upstream: FakeUpstream
) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "default.yaml").write_text("")
    url, process = launch(policies)  # type: ignore[operator]
    assert httpx.post(url + "/v1/chat/completions", json=SMALL).status_code == 200

    (policies / "team.yaml").write_text(f'keys: ["{hash_key("k1")}"]\n')
    process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while httpx.post(url + "/v1/chat/completions", json=SMALL).status_code != 401:
        assert time.monotonic() < deadline, "reload did not happen"
        time.sleep(0.1)
    ok = httpx.post(
        url + "/v1/chat/completions", json=SMALL, headers={"authorization": "Bearer k1"}
    )
    assert ok.status_code == 200 and ok.headers["x-context-policy"] == "team"

    # A broken set is refused and the last good one stays in force.
    (policies / "team.yaml").write_text("budget: {ratio: 9}\n")
    process.send_signal(signal.SIGHUP)
    time.sleep(1.0)
    assert httpx.post(url + "/v1/chat/completions", json=SMALL).status_code == 401
    assert process.poll() is None

    # Fixed again: picked up from the file change alone, without a signal.
    (policies / "team.yaml").unlink()
    deadline = time.monotonic() + 10
    while httpx.post(url + "/v1/chat/completions", json=SMALL).status_code != 200:
        assert time.monotonic() < deadline, "file watching did not reload"
        time.sleep(0.2)


def test_sigterm_finishes_requests_in_flight(
    launch: object, tmp_path: Path, upstream: FakeUpstream, policies_dir: Path
) -> None:
    url, process = launch(policies_dir)  # type: ignore[operator]
    upstream.delay_s = 1.0
    result: dict[str, int] = {}

    def slow_request() -> None:
        result["status"] = httpx.post(
            url + "/v1/chat/completions", json=SMALL, timeout=20
        ).status_code

    thread = threading.Thread(target=slow_request)
    thread.start()
    deadline = time.monotonic() + 5
    while not upstream.requests:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    thread.join(timeout=20)
    assert result.get("status") == 200
    assert process.wait(timeout=20) == 0
    rows = [orjson.loads(line) for line in (tmp_path / "usage.jsonl").read_bytes().splitlines()]
    assert rows and rows[-1]["status"] == 200


def test_bad_policies_refuse_to_start(tmp_path: Path, upstream_url: str) -> None:
    policies = tmp_path / "bad"
    policies.mkdir()
    (policies / "default.yaml").write_text("budget:\n  ratio: 3\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "proxy",
            "serve",
            "--port",
            str(free_port()),
            "--policies",
            str(policies),
        ],
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert f"{policies / 'default.yaml'}:2: budget.ratio".encode() in done.stderr


def test_two_workers_serve(launch: object, policies_dir: Path, upstream: FakeUpstream) -> None:
    url, process = launch(policies_dir, "--workers", "2")  # type: ignore[operator]
    with httpx.Client() as http:
        statuses = {
            http.post(url + "/v1/chat/completions", json=SMALL).status_code for _ in range(20)
        }
    assert statuses == {200}
    children = subprocess.run(
        ["pgrep", "-P", str(process.pid)], capture_output=True, text=True
    ).stdout.split()
    assert len(children) >= 2
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(timeout=30) == 0
