"""Test setup: a LiteLLM proxy to run the hook in, in a virtual environment of its own in
the temp directory (made once per machine, as the browser test installs chromium).

The `litellm[proxy]` extra needs packages the registries do not all carry, and its server
brings dependencies this project has no use for; so the environment gets the same litellm
as this one, the server's own imports, and this project (for the hook). A failure to make
it fails the test: never a skip.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What litellm's proxy server imports, as its `proxy` extra would install them.
SERVER_PACKAGES = ["fastapi", "backoff", "apscheduler", "pyjwt", "python-multipart",
                   "cryptography", "rq", "gunicorn", "pynacl", "websockets", "fastapi-sso",
                   "semver", "Expression", "mcp", "soundfile", "uvloop"]  # fmt: skip
INSTALL_TIMEOUT_S = 900


def litellm_command() -> Path:
    """The `litellm` command of the environment, made first if it is not there yet."""
    litellm = version("litellm")
    home = Path(tempfile.gettempdir()) / f"context-proxy-litellm-{litellm}"
    command = home / "bin" / "litellm"
    ready = home / "ready"
    if ready.exists():
        return command
    home.parent.mkdir(parents=True, exist_ok=True)
    with (home.parent / f"context-proxy-litellm-{litellm}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists():
            return command
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(home)],
            [str(home / "bin" / "pip"), "install", "-q", f"litellm=={litellm}", str(ROOT),
             *SERVER_PACKAGES],
        ]  # fmt: skip
        for step in steps:
            try:
                done = subprocess.run(
                    step, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
                )
            except subprocess.TimeoutExpired:
                pytest.fail(
                    f"making the LiteLLM proxy's environment took over {INSTALL_TIMEOUT_S} s"
                )
            if done.returncode != 0:
                pytest.fail(f"`{' '.join(step[:4])} ...` failed: {done.stderr[-2000:]}")
        ready.touch()
    return command
