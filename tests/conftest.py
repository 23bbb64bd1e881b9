"""Shared fixtures: a fake upstream and the proxy, each served by uvicorn on a loopback port."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from proxy.server.core.settings import Settings

# litellm (imported by the tests of its hook) fetches its model map from GitHub when it is
# imported, unless told to read the copy it ships: tests never touch the internet.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
from tests.fake_upstream import FakeUpstream

# The run fails if a test changed the checkout (tracked files, or new unignored files).
pytest_plugins = ["tests.tree_guard"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(app: Any, port: int | None = None, **options: Any) -> Iterator[str]:
    """Serve an ASGI app with uvicorn in a thread; yields its base URL.

    `options` go to uvicorn.Config as they are (e.g. proxy.server.app.connection_limits.uvicorn_options).
    """
    port = port or free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        loop="asyncio",
        timeout_graceful_shutdown=5,
        **options,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def fake_upstream_server() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve(fake.app()) as url:
        yield fake, url


@pytest.fixture
def upstream(fake_upstream_server: tuple[FakeUpstream, str]) -> FakeUpstream:
    fake, _ = fake_upstream_server
    fake.reset()
    return fake


@pytest.fixture
def upstream_url(fake_upstream_server: tuple[FakeUpstream, str]) -> str:
    return fake_upstream_server[1] + "/v1"


@pytest.fixture
def policies_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "default.yaml").write_text("")
    return folder


class RunningProxy:
    def __init__(self, url: str, settings: Settings) -> None:
        self.url = url
        self.settings = settings

    @property
    def usage_path(self) -> Path:
        return Path(self.settings.usage_log)


@pytest.fixture
def start_proxy(tmp_path: Path, upstream_url: str, policies_dir: Path) -> Iterator[Any]:
    """Call with Settings overrides; the proxy stops at the end of the test."""
    stack: list[Any] = []

    from proxy.server.app.app import create_app  # imported here so unit tests never need the server

    def start(**overrides: Any) -> RunningProxy:
        values: dict[str, Any] = {
            "policies": str(policies_dir),
            "upstream": upstream_url,
            "usage_log": str(tmp_path / "usage.jsonl"),
            "watch_policies": False,
        }
        values.update(overrides)
        settings = Settings(**values)
        ctx = serve(create_app(settings))
        url = ctx.__enter__()
        stack.append(ctx)
        return RunningProxy(url, settings)

    yield start
    for ctx in reversed(stack):
        ctx.__exit__(None, None, None)


@pytest.fixture
def proxy(start_proxy: Any) -> RunningProxy:
    return start_proxy()  # type: ignore[no-any-return]
