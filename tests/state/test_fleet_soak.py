"""The fleet soak in the suite (tests/fleet_soak.py): 60 s, two replica processes on a real
Redis, a mixed load at 20 requests a second with upstream faults, Redis restarted empty three
times, one replica SIGKILLed and the other SIGTERMed under load, malformed bodies; every
figure of tests/fleet_soak_checks.py must hold. The 300 s run is a benchmark
(tests/bench/soak_fleet.py, its figures in docs/benchmarks.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_upstream import FakeUpstream
from tests.fleet_soak import Soak
from tests.fleet_soak_checks import judge, table
from tests.redis_server import RedisServer, running_redis

DURATION_S = 60
RATE = 20


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    folder = tmp_path / "redis"
    folder.mkdir()
    yield from running_redis(folder)


def test_a_fleet_under_faults_keeps_its_rows_counts_limits_and_health(
    tmp_path: Path, upstream: FakeUpstream, upstream_url: str, redis_server: RedisServer
) -> None:
    soak = Soak(tmp_path, redis_server, upstream, upstream_url, DURATION_S, RATE)
    try:
        soak.run()
    finally:
        soak.fleet.stop_all()
    checks, _ = judge(soak)
    assert all(c.met for c in checks), "\n" + table(checks)
