"""The fleet's holds (state/holds.py), with real proxy processes on a real Redis: a request's
hold is let go when it ends, in the shared counters at once; a replica that dies lets go of
its holds within the hold's lifetime whatever the others do; a reserve Redis applies late
is cancelled, never leaked."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis

from proxy.state.counter_keys import MARKER_KEY, holds_key
from proxy.state.holds import FleetHolds
from proxy.state.redis_link import Health
from proxy.usage import Metrics
from tests.conftest import free_port
from tests.fake_upstream import FakeUpstream
from tests.processes import serve_command, wait_ready
from tests.redis_server import RedisServer
from tests.state.test_redis_replicas import Launch, chat, policies, redis_server, replica, until

__all__ = ["redis_server", "replica"]  # the fixtures this module uses

QUOTA = "quotas: {daily_tokens: 4000, hard_limit: true}\n"
SIZED = {"model": "gpt-4o", "max_tokens": 500,
         "messages": [{"role": "user", "content": "hello there"}]}  # fmt: skip


def holds(server: RedisServer, team: str = "default") -> dict[str, str]:
    with redis.Redis.from_url(server.url, decode_responses=True) as client:
        return dict(client.hgetall(holds_key(team)))


def rows(tmp_path: Path) -> list[dict[str, Any]]:
    lines = b"".join(p.read_bytes() for p in tmp_path.glob("usage-*.jsonl"))
    return [orjson.loads(line) for line in lines.splitlines() if line]


async def knows_the_fleet(client: Any, holds_: FleetHolds) -> None:
    """The fleet's marker in Redis, known to `holds_` as a sync would have read it."""
    await client.set(MARKER_KEY, "fleet-1", nx=True)
    holds_.epoch = await client.get(MARKER_KEY)


def dropped(url: str, body: object) -> None:
    """A request whose replica is killed under it: the connection drops."""
    with contextlib.suppress(httpx.TransportError):
        chat(url, body)


def test_alternating_replicas_refuse_exactly_when_the_fleets_use_reaches_the_quota(
    tmp_path: Path, replica: Launch, upstream: FakeUpstream, redis_server: RedisServer
) -> None:
    """Each request is let go and counted in Redis as it is booked: the other replica's
    next check sees it at once (it used to wait for the next sync, and refuse a team that
    had used an eighth of its quota for the holds of requests long answered)."""
    upstream.mode = "sized_usage"
    folder = policies(tmp_path, QUOTA)
    a, b = replica(folder), replica(folder)
    statuses = []
    for n in range(14):
        statuses.append(chat((a, b)[n % 2], SIZED).status_code)
        until(lambda n=n: len(rows(tmp_path)) == n + 1, "the request's row")
    admitted = statuses.count(200)
    assert statuses == [200] * admitted + [429] * (14 - admitted), statuses
    used = [int(r["total_tokens"]) for r in rows(tmp_path) if r["status"] == 200]
    assert sum(used[:-1]) < 4000 <= sum(used), used  # refused exactly at the quota
    assert holds(redis_server) == {}  # nothing held once all is booked


def test_a_killed_replicas_holds_lapse_within_their_lifetime(
    tmp_path: Path, upstream: FakeUpstream, upstream_url: str, redis_server: RedisServer
) -> None:
    """A replica killed while its requests wait upstream: their holds lapse within the
    hold's lifetime (2 s here), however many requests the other replica admits meanwhile
    (each reserve used to renew every hold of the team)."""
    folder = policies(tmp_path, "quotas: {daily_tokens: 4000, hard_limit: true}\n")
    started: list[subprocess.Popen[bytes]] = []

    def start() -> str:
        port = free_port()
        process = subprocess.Popen(
            serve_command(port, folder, upstream_url, tmp_path / f"usage-{port}.jsonl",
                          "--state", redis_server.url),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            cwd=Path(__file__).resolve().parents[2],
            env={**os.environ, "CONTEXT_PROXY_HOLD_TTL_S": "2"},
        )  # fmt: skip
        started.append(process)
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, process)
        return url

    try:
        doomed, survivor = start(), start()
        upstream.delay_s = 30  # the doomed replica's requests wait upstream, holding
        big = {**SIZED, "max_tokens": 2100}  # two reach the quota
        threads = [
            threading.Thread(target=dropped, args=(doomed, big), daemon=True) for _ in range(2)
        ]
        for t in threads:
            t.start()
        until(lambda: len(holds(redis_server)) == 2, "both held in the fleet")
        started[0].send_signal(signal.SIGKILL)
        started[0].wait()
        upstream.delay_s = 0
        assert chat(survivor, SIZED).status_code == 429  # the dead replica's holds still stand
        deadline = time.monotonic() + 6
        while chat(survivor, SIZED).status_code == 429:  # its own requests renew nothing of theirs
            assert time.monotonic() < deadline, "the dead replica's holds never lapsed"
            time.sleep(0.2)
        assert all("|" in v for v in holds(redis_server).values())
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()


def test_a_reserve_redis_applies_late_is_cancelled(redis_server: RedisServer) -> None:
    """The replica stopped waiting (Redis slow): the request goes on under the replica's own
    check; its release, sent when it is booked, cancels the entry whenever Redis made it,
    before or after, and counts nothing twice."""
    from datetime import UTC, datetime

    from redis.asyncio import Redis

    async def run() -> tuple[dict[str, str], dict[str, str], int]:
        client = Redis.from_url(redis_server.url, decode_responses=True)
        now = datetime.now(UTC)
        holds_ = FleetHolds(client, "cp:quota:", "r1", lambda: now, Health(Metrics()))
        await knows_the_fleet(client, holds_)
        assert await holds_.reserve("t", "req-1", 500, (4000, None)) is True
        before = dict(await client.hgetall(holds_key("t")))
        holds_.release("t", "req-1", 0)  # not known as reserved: cancelled, counting nothing
        holds_.release("t", "req-1", 300)  # a retry of the same: applied once only
        await holds_.aclose(2)
        # A reserve that reaches Redis after its release: refused, nothing held.
        late = await holds_.reserve("t", "req-1", 500, (4000, None))
        after = dict(await client.hgetall(holds_key("t")))
        total = int(await client.get(f"cp:quota:t:d:{now:%Y-%m-%d}") or 0)
        await client.aclose()
        assert late is False
        return before, after, total

    before, after, total = asyncio.run(run())
    assert list(before) == ["r1|req-1"] and after == {} and total == 0


def test_sigterm_mid_request_books_its_row_and_lets_its_hold_go(
    tmp_path: Path, upstream: FakeUpstream, upstream_url: str, redis_server: RedisServer
) -> None:
    """At the end of the shutdown's grace uvicorn cancels a request still waiting upstream:
    it gets its usage row (503 server_shutdown, nothing charged) and its fleet hold goes."""
    folder = policies(tmp_path, QUOTA)
    port = free_port()
    process = subprocess.Popen(
        serve_command(port, folder, upstream_url, tmp_path / "usage-1.jsonl",
                      "--state", redis_server.url),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "CONTEXT_PROXY_GRACEFUL_SHUTDOWN_S": "1"},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process)
        upstream.delay_s = 30
        waiting = threading.Thread(
            target=lambda: httpx.post(url + "/v1/chat/completions", json=SIZED, timeout=60),
            daemon=True,
        )
        waiting.start()
        until(lambda: len(holds(redis_server)) == 1, "the request held in the fleet")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        upstream.delay_s = 0
        if process.poll() is None:
            process.kill()
            process.wait()
    (row,) = rows(tmp_path)
    assert (row["status"], row["error"], row["total_tokens"]) == (503, "server_shutdown", 0)
    assert holds(redis_server) == {}


def test_a_replicas_next_reserve_sees_its_own_release(redis_server: RedisServer) -> None:
    """A release goes to Redis in the background (here one slow to get there, as behind a
    busy connection pool); the same replica's next reserve waits for it, so a client's next
    request after an answer never meets that answer's hold (a quota of 50, each request
    holding 60 and using 10: the second refused if the first's hold still stood)."""
    from datetime import UTC, datetime

    from redis.asyncio import Redis

    from proxy.state.holds import Release

    class SlowToSend(FleetHolds):
        async def _send(self, jobs: list[Release]) -> None:
            await asyncio.sleep(0.02)
            await super()._send(jobs)

    async def run() -> list[tuple[bool | None, bool | None]]:
        client = Redis.from_url(redis_server.url, decode_responses=True)
        now = datetime.now(UTC)
        holds_ = SlowToSend(client, "cp:quota:", "r1", lambda: now, Health(Metrics()))
        await knows_the_fleet(client, holds_)
        got = []
        for n in range(5):  # a new team each time: 50 is each one's whole quota
            first = await holds_.reserve(f"t{n}", f"a{n}", 60, (50, None))
            holds_.release(f"t{n}", f"a{n}", 10)  # answered: 10 used
            second = await holds_.reserve(f"t{n}", f"b{n}", 60, (50, None))
            holds_.release(f"t{n}", f"b{n}", 10)
            got.append((first, second))
        await holds_.aclose(2)
        await client.aclose()
        return got

    assert set(asyncio.run(run())) == {(True, True)}


def test_a_reserve_whose_request_is_cancelled_lets_go_of_its_entry(
    redis_server: RedisServer,
) -> None:
    """The request is cancelled (its client gone) while its reserve waits on Redis: the entry
    is let go, in Redis and here, instead of being renewed for as long as the replica runs
    (it stayed among the live entries, its release never sent)."""
    from datetime import UTC, datetime

    from redis.asyncio import Redis

    async def run() -> tuple[int, dict[str, str]]:
        client = Redis.from_url(redis_server.url, decode_responses=True)
        now = datetime.now(UTC)
        holds_ = FleetHolds(client, "cp:quota:", "r1", lambda: now, Health(Metrics()))
        await knows_the_fleet(client, holds_)
        real = holds_._reserve

        async def slow(**kw: Any) -> Any:
            await asyncio.sleep(0.2)
            return await real(**kw)

        holds_._reserve = slow  # type: ignore[assignment]
        task = asyncio.create_task(holds_.reserve("t", "gone", 500, (4000, None)))
        await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await holds_.aclose(2)
        renewed = len(holds_.renewals())
        left = dict(await client.hgetall(holds_key("t")))
        await client.aclose()
        return renewed, left

    assert asyncio.run(run()) == (0, {})
