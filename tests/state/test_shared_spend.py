"""Dollar quotas shared through a real Redis: what one replica's requests cost counts
against the team on every replica (counters of their own, in millionths of a dollar)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from proxy.policy.model import QuotaPolicy, ThresholdPolicy
from proxy.state.redis_link import connect
from proxy.state.replicas import SPEND_PREFIX, SharedState
from proxy.usage.metrics import Metrics
from proxy.usage.quotas import QuotaBook
from tests.redis_server import RedisServer, running_redis

NOW = datetime(2030, 1, 15, 12, 0, tzinfo=UTC)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    yield from running_redis(tmp_path)


async def test_spend_on_one_replica_counts_on_the_other(redis_server: RedisServer) -> None:
    metrics = Metrics()
    tokens_a, spend_a, spend_b = QuotaBook(), QuotaBook(), QuotaBook()
    quota_a = SharedState(connect(redis_server.url), tokens_a, metrics, clock=lambda: NOW)
    a = SharedState(
        connect(redis_server.url), spend_a, metrics, clock=lambda: NOW, prefix=SPEND_PREFIX
    )
    b = SharedState(
        connect(redis_server.url), spend_b, Metrics(), clock=lambda: NOW, prefix=SPEND_PREFIX
    )
    try:
        tokens_a.add("t", 500, NOW)
        spend_a.add("t", 1_250_000, NOW)  # $1.25
        assert await quota_a.sync() and await a.sync() and await b.sync()
        limits = QuotaPolicy(daily_usd=1.0, hard_limit=True).in_micro_usd()
        status = spend_b.status("t", limits, ThresholdPolicy(), NOW)
        assert status.used == 1_250_000 and status.exceeded
        assert await a.client.get("cp:spend:t:d:2030-01-15") == "1250000"
        assert await a.client.get("cp:quota:t:d:2030-01-15") == "500"  # apart from tokens
    finally:
        for state in (quota_a, a, b):
            await state.client.aclose()
