"""Rate limits shared by the fleet (state/rate_shared.py): two replicas on one Redis draw
on the same buckets, so a team's requests per minute hold whichever replica serves them;
a replica whose Redis is gone draws on its own."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from proxy.state.rate_shared import SharedRates
from proxy.state.redis_link import Health
from proxy.usage import Metrics
from proxy.usage.rate_limits import Draw, Refused
from tests.fake_upstream import FakeUpstream
from tests.redis_server import RedisServer
from tests.state.test_redis_replicas import Launch, chat, policies, redis_server, replica

__all__ = ["redis_server", "replica"]  # the fixtures this module uses


def test_two_replicas_draw_on_the_same_buckets(
    tmp_path: Path, replica: Launch, upstream: FakeUpstream
) -> None:
    folder = policies(tmp_path, "rate_limits: {requests_per_minute: 10}\n")
    a, b = replica(folder), replica(folder)
    began = time.monotonic()
    statuses = [chat((a, b)[n % 2]).status_code for n in range(30)]
    refilled = int((time.monotonic() - began) / 6)  # a request's worth every 6 s
    assert 10 <= statuses.count(200) <= 10 + refilled, statuses
    assert statuses[:10] == [200] * 10  # both replicas admitted from the one bucket


def test_a_replica_without_redis_draws_on_its_own_buckets(redis_server: RedisServer) -> None:
    from redis.asyncio import Redis

    async def run() -> list[bool]:
        client = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.05)
        rates = SharedRates(client, Health(Metrics()))
        got = [await rates.draw([Draw("t:x:requests", 2, 1, whole=True)]) for _ in range(3)]
        await client.aclose()
        return [isinstance(g, Refused) for g in got]

    assert asyncio.run(run()) == [False, False, True]
