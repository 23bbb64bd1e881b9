"""Test setup: find headless Chromium, installing Debian's `chromium` with apt when missing.

No PyPI package ships a browser that works offline, so on a fresh machine (as root, with
apt-get) the first browser test installs it once; anything else is a failure, never a skip.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

INSTALL_TIMEOUT_S = 900  # apt-get update + chromium and its libraries on a slow mirror
LOCK = Path(tempfile.gettempdir()) / "context-proxy-chromium-install.lock"
APT = "apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium"


def find_chromium() -> str | None:
    """The browser on PATH (Debian calls it `chromium`, Ubuntu `chromium-browser`)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None and os.access("/usr/bin/chromium", os.X_OK):
        path = "/usr/bin/chromium"
    return path


def install_chromium() -> str:
    """Run apt once (other test processes wait on the lock, then find it installed)."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.fail(
            "chromium is not installed and this is not root with apt-get: "
            "install it yourself (apt-get install chromium) to run the dashboard browser test"
        )
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel runs queue here instead of racing dpkg
        if (path := find_chromium()) is not None:
            return path  # another process installed it while we waited
        started = time.monotonic()
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        try:
            done = subprocess.run(
                ["sh", "-c", APT],
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_S,
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"installing chromium with apt-get took over {INSTALL_TIMEOUT_S} s")
        path = find_chromium()
        if done.returncode != 0 or path is None:
            pytest.fail(
                f"could not install chromium with `{APT}` (exit {done.returncode}): "
                f"{done.stderr[-1500:]}"
            )
        took = time.monotonic() - started
        print(f"installed chromium with apt-get in {took:.0f} s")  # shown with -s / on failure
        return path


def obtain_chromium() -> str:
    """A path to a headless-capable Chromium, installing it if this machine allows."""
    return find_chromium() or install_chromium()
