"""Starting the real `python -m proxy serve` command for tests that need a separate process."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx


def serve_command(
    port: int, policies: Path | str, upstream: str, usage_log: Path | str, *extra: str
) -> list[str]:
    return [
        sys.executable, "-m", "proxy", "serve", "--port", str(port), "--policies", str(policies),
        "--upstream", upstream, "--usage-log", str(usage_log), *extra,
    ]  # fmt: skip


def healthy(url: str) -> bool:
    """Whether a proxy at `url` answers /healthz with 200 right now."""
    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def wait_ready(url: str, process: subprocess.Popen[bytes], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(
                f"proxy exited early: {process.stderr.read() if process.stderr else ''!r}"
            )
        if healthy(url):
            return
        time.sleep(0.05)
    raise AssertionError("proxy did not become ready")
