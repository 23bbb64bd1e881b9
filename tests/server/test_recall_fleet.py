"""Two replicas on one Redis under a model that calls `context_recall` without end (200
calls in every answer, each answer continued as far as the policy allows): no team is
charged past its hard quota by more than one request, and each replica answers /healthz
within 250 ms throughout. Holds live 3 s, as a replica that stalled would let them lapse.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.policy.model import hash_key
from tests.conftest import free_port
from tests.fake_upstream import FakeUpstream
from tests.processes import serve_command, wait_ready
from tests.server.test_recall_bounds import HEALTHZ_BOUND_S, Prober, long_chat
from tests.state.test_redis_replicas import redis_server, until

__all__ = ["redis_server"]  # the fixture this module uses

QUOTA = 20_000
KEYS = {"quota": "cp-fleet-quota", "storm": "cp-fleet-storm"}


@pytest.fixture
def fleet(tmp_path: Path, upstream_url: str, redis_server: Any) -> Iterator[list[str]]:
    """Two replicas on the shared Redis, holds lasting 3 s: a team with a hard quota of
    QUOTA tokens, and another team without one."""
    folder = tmp_path / "policies"
    folder.mkdir()
    common = "models:\n  gpt-4o-mini: {context_window: 16000}\nrecall: {tool: on, rounds: 2}\n"
    (folder / "quota.yaml").write_text(
        f'team: quota\nkeys: ["{hash_key(KEYS["quota"])}"]\n{common}'
        f"quotas: {{daily_tokens: {QUOTA}, hard_limit: true}}\n"
    )
    (folder / "storm.yaml").write_text(
        f'team: storm\nkeys: ["{hash_key(KEYS["storm"])}"]\n{common}'
    )
    processes: list[subprocess.Popen[bytes]] = []
    urls = []
    for _ in range(2):
        port = free_port()
        process = subprocess.Popen(
            serve_command(port, folder, upstream_url, tmp_path / f"usage-{port}.jsonl",
                          "--state", redis_server.url),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            cwd=Path(__file__).resolve().parents[2],
            env={**os.environ, "CONTEXT_PROXY_HOLD_TTL_S": "3"},
        )  # fmt: skip
        processes.append(process)
        urls.append(f"http://127.0.0.1:{port}")
        wait_ready(urls[-1], process)
    yield urls
    for process in processes:
        process.kill()
        process.wait()


def rows(tmp_path: Path) -> list[dict[str, Any]]:
    lines = b"".join(p.read_bytes() for p in tmp_path.glob("usage-*.jsonl"))
    return [orjson.loads(line) for line in lines.splitlines() if line]


def test_a_model_that_recalls_without_end_overspends_no_quota_and_stalls_no_replica(
    fleet: list[str], upstream: FakeUpstream, tmp_path: Path
) -> None:
    upstream.mode = "recall_storm_forever"
    # 200 calls are ~5,000 tokens of an answer: the limit lets the model say them all.
    quota = {"model": "gpt-4o-mini", "max_tokens": 6000, "messages": long_chat(300)}
    storm = {**quota, "messages": long_chat(1200)}

    async def send(url: str, key: str, body: dict[str, Any]) -> int:
        async with httpx.AsyncClient(timeout=120) as http:
            reply = await http.post(
                url + "/v1/chat/completions", json=body,
                headers={"authorization": f"Bearer {KEYS[key]}"},
            )  # fmt: skip
            return reply.status_code

    async def run() -> list[int]:
        sends = [send(fleet[n % 2], "storm", storm) for n in range(2)]
        sends += [send(fleet[n % 2], "quota", quota) for n in range(12)]
        return list(await asyncio.gather(*sends))

    with Prober(fleet[0]) as first, Prober(fleet[1]) as second:
        statuses = asyncio.run(run())
    assert statuses[:2] == [200, 200]  # the other team's storm is answered
    assert set(statuses[2:]) <= {200, 429} and 429 in statuses[2:], statuses
    until(lambda: len(rows(tmp_path)) == 14, "every request's row")
    mine = [r for r in rows(tmp_path) if r["team"] == "quota"]
    charged = [r["total_tokens"] for r in mine]
    assert sum(charged) <= QUOTA + max(charged), charged
    assert all(r["recall_rounds"] <= 2 for r in mine)
    assert first.count >= 5 and second.count >= 5
    worst = max(first.worst, second.worst)
    assert worst < HEALTHZ_BOUND_S, f"/healthz took {worst:.3f} s"
