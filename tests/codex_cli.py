"""Test setup: the Codex CLI from npm (`@openai/codex`, which ships its binary in the
package), installed once per machine into the temp directory, as the browser test installs
chromium. Without npm, or when the registry cannot be reached, the test fails: never skips.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

VERSION = "0.171.0"  # the release the captured request (tests/tokens/data) came from
INSTALL_TIMEOUT_S = 600
PREFIX = Path(tempfile.gettempdir()) / f"context-proxy-codex-{VERSION}"


def codex_binary() -> Path:
    """The `codex` launcher, installing the package first if it is not there yet."""
    launcher = PREFIX / "node_modules" / ".bin" / "codex"
    if launcher.exists():
        return launcher
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("npm is not installed: install Node.js 18+ to run the Codex CLI tests")
    PREFIX.mkdir(parents=True, exist_ok=True)
    with (PREFIX / "install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel runs wait here, then find it installed
        if launcher.exists():
            return launcher
        command = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(PREFIX),
                   f"@openai/codex@{VERSION}"]  # fmt: skip
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"installing the Codex CLI with npm took over {INSTALL_TIMEOUT_S} s")
        if done.returncode != 0 or not launcher.exists():
            pytest.fail(f"`{' '.join(command)}` failed ({done.returncode}): {done.stderr[-1500:]}")
    return launcher


def codex_environment(home: Path, key_variable: str, key: str) -> dict[str, str]:
    """Codex's own state in `home`, nothing from the machine's ~/.codex; no telemetry."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TMPDIR", "USER")}
    return {**keep, "HOME": str(home), "CODEX_HOME": str(home / ".codex"), key_variable: key,
            "RUST_LOG": "error", "NO_COLOR": "1"}  # fmt: skip
