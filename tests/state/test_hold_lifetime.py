"""A hold lives as long as its request, whatever the replica's event loop is doing: renewed
from a thread of its own (state/renewal.py), so another replica never admits into the same
room while the loop is held up; and at midnight a hold in flight stays counted in the day
its request will be charged to."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.server.app.app import create_app
from proxy.server.core.settings import Settings
from proxy.state.counter_keys import MARKER_KEY, holds_key
from proxy.state.holds import FleetHolds
from proxy.state.redis_link import Health
from proxy.usage import Metrics
from tests.conftest import free_port, serve
from tests.fake_upstream import FakeUpstream
from tests.processes import serve_command, wait_ready
from tests.redis_server import RedisServer, running_redis
from tests.state.fleet import ROOT
from tests.state.test_fleet_holds import holds

TTL_S = 3
QUOTA = "quotas: {daily_tokens: 20000, hard_limit: true}\n"
# Its prompt and answer limit hold the whole quota (20,000) while it waits upstream.
LONG = {"model": "gpt-4o", "max_tokens": 19_990,
        "messages": [{"role": "user", "content": "write at length"}]}  # fmt: skip
SMALL = {"model": "gpt-4o", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    folder = tmp_path / "redis"
    folder.mkdir()
    yield from running_redis(folder)


def stallable(app: Any) -> Any:
    """The app, and `GET /stall?S` that blocks its event loop for S seconds (time.sleep: what
    a handler stuck in a long computation or a blocking call does to every request)."""

    async def wrapper(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/stall":
            time.sleep(float(scope["query_string"] or b"1"))
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await app(scope, receive, send)

    return wrapper


def admitted_or_not(url: str) -> int | str:
    """B's answer to a small request: 429, or "admitted" once it waits upstream."""
    try:
        return httpx.post(url + "/v1/chat/completions", json=SMALL, timeout=2).status_code
    except httpx.ReadTimeout:
        return "admitted"


def test_a_stalled_replica_keeps_its_holds_and_the_other_keeps_refusing(
    tmp_path: Path, upstream: FakeUpstream, upstream_url: str, redis_server: RedisServer
) -> None:
    """A's loop is blocked for 2.5 hold lifetimes while its request holds the whole quota:
    B refuses every request meanwhile (the holds were renewed from A's loop, lapsed after
    3 s, and B admitted)."""
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "default.yaml").write_text(QUOTA)
    settings = Settings(
        policies=str(folder), upstream=upstream_url, usage_log=str(tmp_path / "usage-a.jsonl"),
        state=redis_server.url, hold_ttl_s=TTL_S,
    )  # fmt: skip
    port = free_port()
    b = subprocess.Popen(
        serve_command(port, folder, upstream_url, tmp_path / "usage-b.jsonl",
                      "--state", redis_server.url),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
        env={**os.environ, "CONTEXT_PROXY_HOLD_TTL_S": str(TTL_S)},
    )  # fmt: skip
    b_url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(b_url, b)
        with serve(stallable(create_app(settings))) as a_url:
            upstream.delay_s = 4 * TTL_S  # the long request waits upstream, holding
            long = threading.Thread(
                target=lambda: httpx.post(a_url + "/v1/chat/completions", json=LONG, timeout=60),
                daemon=True,
            )
            long.start()
            deadline = time.monotonic() + 10
            while len(holds(redis_server)) != 1:
                assert time.monotonic() < deadline, "the long request never held"
                time.sleep(0.05)
            stall = threading.Thread(
                target=lambda: httpx.get(a_url + f"/stall?{2.5 * TTL_S}", timeout=60), daemon=True
            )
            stall.start()
            statuses: list[int | str] = []
            while stall.is_alive():
                statuses.append(admitted_or_not(b_url))
                time.sleep(0.25)
            assert set(statuses) == {429} and len(statuses) >= 3 * TTL_S, statuses
            upstream.delay_s = 0
            long.join(30)
    finally:
        upstream.delay_s = 0
        b.kill()
        b.wait()


def test_a_hold_in_flight_at_midnight_counts_in_the_day_it_will_be_charged_to(
    redis_server: RedisServer,
) -> None:
    """A holds the whole of a 4,000 daily quota at 23:59:58 (Redis's own clock past midnight);
    B asks at 00:00:01: A's request will be charged to the new day, so its hold counts there
    (it used to drop out of the count: another day's, and its hash expired at midnight)."""
    from redis.asyncio import Redis

    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    now = [today - timedelta(seconds=2)]  # yesterday, 23:59:58

    async def run() -> tuple[bool | None, bool | None, bool | None, str | None]:
        client = Redis.from_url(redis_server.url, decode_responses=True)
        await client.set(MARKER_KEY, "fleet-1")
        made = [
            FleetHolds(client, "cp:quota:", name, lambda: now[0], Health(Metrics()))
            for name in ("a", "b")
        ]
        for one in made:
            one.epoch = "fleet-1"
        a, b = made
        held = await a.reserve("t", "long", 4000, (4000, None))
        now[0] = today + timedelta(seconds=1)
        refused = await b.reserve("t", "next", 2000, (4000, None))
        now[0] = today + timedelta(seconds=2)
        a.release("t", "long", 3500)  # answered: charged to the new day
        await a.aclose(5)
        after = await b.reserve("t", "after", 100, (4000, None))
        counted = await client.get(f"cp:quota:t:d:{today:%Y-%m-%d}")
        await client.aclose()
        return held, refused, after, counted

    assert asyncio.run(run()) == (True, False, True, "3500")
    assert list(holds(redis_server, "t")) == ["b|after"]
    assert holds_key("t") == "cp:quota:holds:t"
