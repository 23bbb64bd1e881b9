"""What replicas hand a Redis that came back without the fleet's state (state/handover.py):
the newest total any of them read and what each counted since, as additions, exactly once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from proxy.state.counter_keys import MARKER_KEY
from proxy.state.redis_link import connect
from proxy.state.replicas import SharedState
from proxy.usage.metrics import Metrics
from proxy.usage.quotas import QuotaBook
from tests.redis_server import RedisServer, running_redis

NOW = datetime(2030, 1, 15, 12, 0, tzinfo=UTC)
DAY, MONTH = "cp:quota:t:d:2030-01-15", "cp:quota:t:m:2030-01"
LIMITS = (10**9, None)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    yield from running_redis(tmp_path)


@pytest.fixture
async def replicas(redis_server: RedisServer) -> AsyncIterator[Callable[[], SharedState]]:
    made: list[SharedState] = []

    def make() -> SharedState:
        state = SharedState(connect(redis_server.url), QuotaBook(), Metrics(), clock=lambda: NOW)
        made.append(state)
        return state

    yield make
    for state in made:
        await state.client.aclose()


async def booked(state: SharedState, request: str, used: int, held: bool = False) -> None:
    """A request held in the fleet (now, unless `held` before) and booked: its release
    counted in Redis at once."""
    if not held:
        assert await state.reserve("t", request, used, LIMITS) is True
    state.quotas.add("t", used, NOW, shared=True)
    state.release("t", request, used)
    await state.holds.aclose(5)  # the release sent


async def totals(state: SharedState) -> list[int]:
    return [int(v or 0) for v in await state.client.mget([DAY, MONTH])]


@pytest.mark.parametrize("first", ["a", "b"])
async def test_releases_since_the_last_read_and_on_the_empty_redis_are_all_kept(
    replicas: Any, redis_server: RedisServer, first: str
) -> None:
    """The two ways a restart lost counts: releases booked after a replica's last read were
    put back as that read's total, and releases booked on the empty Redis were overwritten
    when a replica put its total back (SET 100 over the 5 counted there)."""
    a, b = replicas(), replicas()
    a.quotas.add("t", 100, NOW)
    assert await a.sync() and await b.sync()  # both read 100
    await booked(a, "r1", 20)  # after a's read
    await booked(b, "r2", 30)  # after b's read
    assert await b.reserve("t", "r3", 5, LIMITS) is True
    redis_server.restart()  # empty
    await booked(b, "r3", 5, held=True)  # on the empty Redis, before any sync: a new marker
    for state in (a, b) if first == "a" else (b, a):
        assert await state.sync()
    assert await totals(a) == [155, 155]
    assert await a.sync() and await b.sync()  # a second round adds nothing
    assert await totals(a) == [155, 155]
    assert a.quotas.used("t", NOW) == b.quotas.used("t", NOW) == (155, 155)


async def test_the_newest_total_read_takes_back_the_releases_it_holds(
    replicas: Any, redis_server: RedisServer
) -> None:
    """b read early and hands back its release on top of its older total; a read later (its
    total holds b's release) and raises the counter to its total without counting b's
    release twice."""
    a, b = replicas(), replicas()
    a.quotas.add("t", 100, NOW)
    assert await a.sync() and await b.sync()  # both read 100
    await booked(b, "r1", 30)  # after b's read
    await booked(a, "r2", 7)
    assert await a.sync()  # a reads 137: b's release and its own in it
    redis_server.restart()
    assert await b.sync()  # b: 100 read, and its 30 counted since: 130
    assert await totals(a) == [130, 130]
    assert await a.sync()  # a: 137 read, of which b's 30 are back already: +7
    assert await totals(a) == [137, 137]


async def test_a_handover_whose_reply_was_lost_adds_nothing_the_second_time(
    replicas: Any, redis_server: RedisServer
) -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    a = replicas()
    a.quotas.add("t", 100, NOW)
    assert await a.sync()
    await booked(a, "r1", 20)
    a.quotas.add("t", 3, NOW)  # unsent
    redis_server.restart()
    real = a._apply

    async def applied_then_lost(**kw: Any) -> Any:
        await real(**kw)
        raise RedisConnectionError("connection reset after the write")

    a._apply = applied_then_lost
    assert not await a.sync()
    a._apply = real
    assert await a.sync()
    assert await totals(a) == [123, 123]


async def test_a_redis_that_kept_its_data_is_handed_nothing_again(
    replicas: Any, redis_server: RedisServer
) -> None:
    """The marker came back with the counters (persistence): what was counted is there, and
    nothing is added twice; a Redis without it gets everything back."""
    a, b = replicas(), replicas()
    a.quotas.add("t", 100, NOW)
    assert await a.sync() and await b.sync()
    await booked(a, "r1", 20)
    await booked(b, "r2", 30)
    marker = await a.client.get(MARKER_KEY)
    redis_server.restart(keep_data=True)
    assert await a.client.get(MARKER_KEY) == marker
    assert await a.sync() and await b.sync()
    assert await totals(a) == [150, 150]
    redis_server.restart()  # now without it
    assert await b.sync() and await a.sync()
    assert await totals(a) == [150, 150]
    assert await a.client.get(MARKER_KEY) not in (None, marker)


async def test_a_replica_started_later_knows_a_team_charged_only_through_holds(
    replicas: Any, redis_server: RedisServer
) -> None:
    """A team under a hard quota is charged only as its holds go: a replica started after
    learns its totals from the month's set of teams, also once Redis came back empty (it
    was never in the set, or not after the restart, and the new replica's own check, which
    stands while Redis has not had the counts handed back, read 0 for a spent quota)."""
    a = replicas()
    assert await a.sync()
    await booked(a, "r1", 40)
    later = replicas()
    assert await later.sync()
    assert later.quotas.used("t", NOW) == (40, 40)
    redis_server.restart()  # empty
    assert await a.sync()  # hands the counts back
    latest = replicas()
    assert await latest.sync()
    assert latest.quotas.used("t", NOW) == (40, 40)
