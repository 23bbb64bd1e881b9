"""Test setup: agent CLIs from npm, installed once per machine into the temp directory, as
the browser test installs chromium: the Codex CLI (`@openai/codex`) and Claude Code
(`@anthropic-ai/claude-code`), each of which ships its binary in the package. Without npm,
or when the registry cannot be reached, the test fails: never skips.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# The releases the captured requests (tests/tokens/data, tests/anthropic/data) came from.
CODEX = ("@openai/codex", "0.171.0", "codex")
CLAUDE_CODE = ("@anthropic-ai/claude-code", "2.1.197", "claude")
INSTALL_TIMEOUT_S = 600


def npm_binary(package: tuple[str, str, str]) -> Path:
    """The package's launcher, installing the package first if it is not there yet."""
    name, version, command_name = package
    prefix = Path(tempfile.gettempdir()) / f"context-proxy-{command_name}-{version}"
    launcher = prefix / "node_modules" / ".bin" / command_name
    if launcher.exists():
        return launcher
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail(f"npm is not installed: install Node.js 18+ to run the {name} tests")
    prefix.mkdir(parents=True, exist_ok=True)
    with (prefix / "install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel runs wait here, then find it installed
        if launcher.exists():
            return launcher
        command = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                   f"{name}@{version}"]  # fmt: skip
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"installing {name} with npm took over {INSTALL_TIMEOUT_S} s")
        if done.returncode != 0 or not launcher.exists():
            pytest.fail(f"`{' '.join(command)}` failed ({done.returncode}): {done.stderr[-1500:]}")
    return launcher


def client_environment(home: Path, **variables: str) -> dict[str, str]:
    """A CLI's own state in `home`, nothing from the machine's; no telemetry, no updates."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TMPDIR", "USER")}
    quiet = {"RUST_LOG": "error", "NO_COLOR": "1", "DISABLE_TELEMETRY": "1",
             "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}  # fmt: skip
    return {**keep, **quiet, "HOME": str(home), **variables}
