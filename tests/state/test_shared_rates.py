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


REQUEST = [Draw("t:x:requests", 10, 1, whole=True)]  # 10 requests a minute


async def admitted(rates: list[SharedRates], tries: int) -> int:
    """How many of `tries` requests, spread over the replicas, their buckets admit."""
    got = [await rates[n % len(rates)].draw(REQUEST) for n in range(tries)]
    return sum(not isinstance(g, Refused) for g in got)


async def test_levels_read_before_redis_came_back_empty_are_handed_back(
    redis_server: RedisServer,
) -> None:
    """Redis restarted without its data: the bucket is put back at the lowest level the
    replicas read (refilled since), less what they drew meanwhile; it used to start full,
    and a team got a second minute's worth at once."""
    from redis.asyncio import Redis

    client = Redis.from_url(redis_server.url, decode_responses=True)
    a, b = SharedRates(client, Health(Metrics())), SharedRates(client, Health(Metrics()))
    assert await admitted([a], 6) == 6 and await admitted([b], 2) == 2  # 2 left
    redis_server.restart()  # empty
    after = await admitted([a, b], 10)
    await client.aclose()
    assert after <= 3, after  # the 2 left, and a refill of at most one in the meantime


async def test_what_a_replica_drew_on_its_own_is_handed_over(redis_server: RedisServer) -> None:
    """Two replicas drew 4 each on their own buckets while Redis was away: once it is back
    (with its data here), the fleet's bucket has those 8 taken off; each replica's own
    bucket used to be forgotten, and the fleet's admitted 10 more."""
    from redis.asyncio import Redis

    client = Redis.from_url(redis_server.url, decode_responses=True)
    a, b = SharedRates(client, Health(Metrics())), SharedRates(client, Health(Metrics()))
    assert await admitted([a, b], 2) == 2  # both know the fleet
    redis_server.stop(save=True)
    assert await admitted([a], 4) == 4 and await admitted([b], 4) == 4  # on their own
    redis_server.start()
    after = await admitted([a, b], 10)
    await client.aclose()
    assert after <= 1, after  # 10 - 2 - 8 = 0 left, and a refill of at most one
