"""The count calibration shared through a real Redis: a replica that never saw a Claude
answer counts Claude as the fleet's answers showed; what a failed round took goes next
round."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.policy.model import Policy
from proxy.state.calibration_share import share_calibration
from proxy.state.redis_link import connect
from proxy.state.replicas import SharedState
from proxy.tokens import TokenCounter
from proxy.tokens.counter import calibration_key
from proxy.usage.metrics import Metrics
from proxy.usage.quotas import QuotaBook
from tests.redis_server import RedisServer, running_redis

MODEL = "claude-sonnet-4-6"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "word " * 400}]}


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    yield from running_redis(tmp_path)


async def test_a_fresh_replica_counts_as_the_fleets_answers_showed(
    redis_server: RedisServer,
) -> None:
    a, b = (SharedState(connect(redis_server.url), QuotaBook(), Metrics()) for _ in range(2))
    a.counter, b.counter = TokenCounter(), TokenCounter()
    try:
        counted = a.counter.chat_tokenizer(MODEL, Policy()).count_request(BODY)
        for _ in range(4):  # the upstream reports 1.6 times the raw estimate
            a.counter.observe_reported(MODEL, counted, 1.25, round(counted / 1.25 * 1.6))
        assert await a.sync() and await b.sync()
        fleet = b.counter.calibration.factor(calibration_key("", MODEL))
        assert fleet is not None and fleet >= 1.6 * 1.02 - 0.001  # reported: rounded to a token
        assert b.counter.chat_tokenizer(MODEL, Policy()).count_request(BODY) >= counted / 1.25 * 1.6
        assert await a.sync()  # nothing new: the samples are not added twice
        shared = await a.client.hget("cp:count:" + calibration_key("", MODEL), "samples")
        assert shared is not None and int(shared) == 4
    finally:
        await a.client.aclose()
        await b.client.aclose()


async def test_answers_a_failed_round_took_go_next_round(redis_server: RedisServer) -> None:
    counter = TokenCounter()
    counter.observe_reported(MODEL, 1000, 1.25, 1500)
    down = connect("redis://127.0.0.1:1/0")  # nothing listens there
    with pytest.raises(Exception):  # noqa: B017 - whatever redis raises for a refused connection
        await share_calibration(down, counter, "r1")
    await down.aclose()
    client = connect(redis_server.url)
    try:
        await share_calibration(client, counter, "r1")
        assert int(await client.hget("cp:count:" + calibration_key("", MODEL), "samples")) == 1
    finally:
        await client.aclose()


async def test_a_figure_out_of_the_band_in_redis_is_clamped_on_the_way_in(
    redis_server: RedisServer,
) -> None:
    """Whatever another process wrote under the key, a replica installs at most the band's
    top (2.0 for Claude) and skips what is not a number."""
    replica = SharedState(connect(redis_server.url), QuotaBook(), Metrics())
    replica.counter = TokenCounter()
    key = "cp:count:" + calibration_key("", MODEL)
    try:
        await replica.client.hset(key, mapping={"samples": "9", "ratio:x": "1e9", "ratio:y": "no"})
        await replica.client.hset("cp:count:\tclaude-bad", mapping={"samples": "x"})
        await replica.client.sadd("cp:count:models", calibration_key("", MODEL), "\tclaude-bad")
        assert await replica.sync()
        assert replica.counter.calibration.factor(calibration_key("", MODEL)) == 2.0
    finally:
        await replica.client.aclose()
