"""A revoke `keys` reports as done is in force on a running `python -m proxy serve` within
seconds, the last key's too: the server then refuses everyone, and never opens."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy.policy.model import hash_key
from tests.cli.test_cli import ROOT
from tests.cli.test_keys import CHAT, HANDWRITTEN, keys
from tests.conftest import free_port
from tests.fake_upstream import FakeUpstream
from tests.processes import serve_command, wait_ready

IN_FORCE_S = 15  # the server reads a changed folder once it has been quiet for 2 s


@pytest.fixture
def served(tmp_path: Path, upstream_url: str) -> Iterator[tuple[str, Path]]:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "research.yaml").write_text(HANDWRITTEN)
    port = free_port()
    command = serve_command(port, folder, upstream_url, tmp_path / "usage.jsonl")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process)
        yield url, folder
    finally:
        process.terminate()
        process.wait(timeout=20)


def status(url: str, key: str | None) -> int:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.post(url + "/v1/chat/completions", headers=headers, json=CHAT).status_code


def until(condition: object, what: str) -> None:
    deadline = time.monotonic() + IN_FORCE_S
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not in force after {IN_FORCE_S} s: {what}"
        time.sleep(0.2)


def test_the_last_key_revoked_is_refused_within_seconds_and_nothing_opens(
    served: tuple[str, Path], upstream: FakeUpstream
) -> None:
    url, folder = served
    _, out, _ = keys(folder, "new", "--team", "research", "--label", "ci")
    second = out.strip()
    until(lambda: status(url, second) == 200, "the new key admitted")
    code, _, err = keys(folder, "revoke", hash_key(second)[7:20])
    assert code == 0 and "revoked" in err
    until(lambda: status(url, second) == 401, "the revoked key refused")

    assert status(url, "test") == 200  # the file's own key, the last one left
    code, _, err = keys(folder, "revoke", "9f86d081")
    assert code == 1 and "last key" in err and "refuses every request" in err
    code, _, err = keys(folder, "revoke", "9f86d081", "--allow-open")
    assert code == 0 and "revoked" in err and "refuses every request" in err
    until(lambda: status(url, "test") == 401, "the last key refused")
    forwarded = len(upstream.requests)
    assert status(url, None) == 401 and status(url, "anything") == 401  # not open mode
    assert len(upstream.requests) == forwarded

    _, out, _ = keys(folder, "new", "--team", "research")
    until(lambda: status(url, out.strip()) == 200, "a key added again admitted")
    assert status(url, "test") == 401 and status(url, None) == 401
