"""A fleet's counts survive Redis coming back empty under load: two replica processes at
~20 requests a second, Redis restarted without its data several times; at the end each
team's counters in Redis (tokens and spend) hold at least what its usage rows charged."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fake_upstream import FakeUpstream
from tests.redis_server import RedisServer, running_redis
from tests.state.fleet import (
    Fleet,
    charged,
    charged_micro_usd,
    chat_body,
    paced,
    periods,
    steady,
    team_policies,
    until,
)

RATE = 20  # requests a second, through both replicas
RESTARTS = 4
TEAMS = {
    # Held in the fleet: each request's hold and what it used go through Redis at once.
    "held": "quotas: {daily_tokens: 100000000, daily_usd: 100000, hard_limit: true}",
    # Counted by each replica and handed over with its sync (every 0.5 s).
    "counted": "quotas: {daily_tokens: 100000000}",
}


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    folder = tmp_path / "redis"
    folder.mkdir()
    yield from running_redis(folder)


@pytest.fixture
def fleet(tmp_path: Path, redis_server: RedisServer, upstream_url: str) -> Iterator[Fleet]:
    made = Fleet(tmp_path, redis_server, upstream_url, tmp_path / "policies")
    yield made
    made.stop_all()


def test_counts_survive_redis_restarting_empty_under_load(
    fleet: Fleet, redis_server: RedisServer, upstream: FakeUpstream
) -> None:
    """Each restart used to lose what was booked since each replica's last sync (up to
    0.5 s of every team's traffic), and releases booked on the empty Redis before a
    replica put its last total back were overwritten by it."""
    keys = team_policies(fleet.policies, TEAMS)
    a, b = fleet.start("a"), fleet.start("b")
    teams = sorted(TEAMS)

    async def send(client: httpx.AsyncClient, n: int) -> int:
        team, url = teams[n % 2], (a, b)[(n // 2) % 2].url
        headers = {"authorization": f"Bearer {keys[team]}"}
        body = chat_body(n, stream=n % 3 == 0, stream_options={"include_usage": True})
        r = await client.post(url + "/v1/chat/completions", json=body, headers=headers)
        return r.status_code

    async def restarts() -> None:
        for _ in range(RESTARTS):
            await asyncio.sleep(2.5)
            await asyncio.to_thread(redis_server.restart)  # empty: no persistence

    async def run() -> list[Any]:
        answers, _ = await asyncio.gather(paced(RATE, 2.5 * RESTARTS + 2.5, send), restarts())
        return answers

    statuses = asyncio.run(run())
    assert statuses.count(200) == len(statuses), statuses
    until(lambda: len(fleet.rows()) == len(statuses), "every request's row")
    rows = fleet.rows()
    # Per period (a run across midnight compares the new day's counters, and rows since).
    for period in periods(rows):
        counted = {t: steady(lambda t=t, p=period: fleet.counter(t, period=p)) for t in teams}
        rowed = {team: charged(rows, team, period) for team in teams}
        # At least what the rows charged; handed over, never doubled (two answers' worth of
        # slack for a batch applied whose reply was lost, and read by the other replica).
        for team in teams:
            assert rowed[team] <= counted[team] <= rowed[team] + 2 * 18, (period, counted, rowed)
        spend = steady(lambda period=period: fleet.counter("held", "cp:spend:", period))
        spent = charged_micro_usd(rows, "held", period)
        assert spent <= spend <= spent * 1.01, (period, spend, spent)
