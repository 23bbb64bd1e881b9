"""A fleet for tests: `python -m proxy serve --state` processes on one real Redis, their
usage logs, the teams' counters in Redis, and a steady load at a given rate."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis

from proxy.policy.model import hash_key
from tests.conftest import free_port
from tests.processes import serve_command, wait_ready
from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]


def team_policies(folder: Path, teams: dict[str, str]) -> dict[str, str]:
    """One policy file per team (its YAML body after `team` and `keys`); the team's key."""
    folder.mkdir(parents=True, exist_ok=True)
    keys = {}
    for team, body in teams.items():
        key = keys[team] = f"sk-{team}-fleet-test"
        (folder / f"{team}.yaml").write_text(f"team: {team}\nkeys: [{hash_key(key)!r}]\n{body}\n")
    return keys


@dataclass
class Replica:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    usage_log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def rows(self) -> list[dict[str, Any]]:
        """Its usage log's whole rows."""
        if not self.usage_log.exists():
            return []
        lines = self.usage_log.read_bytes().splitlines()
        return [orjson.loads(line) for line in lines if line.endswith(b"}")]


@dataclass
class Fleet:
    """Replicas started by the test, each with its own usage log and its own output file."""

    tmp: Path
    redis: RedisServer
    upstream_url: str
    policies: Path
    env: dict[str, str] = field(default_factory=dict)
    replicas: list[Replica] = field(default_factory=list)

    def start(self, name: str, port: int | None = None) -> Replica:
        port = port or free_port()
        n = sum(1 for r in self.replicas if r.name == name)
        usage_log = self.tmp / f"usage-{name}-{n}.jsonl"
        out = open(self.tmp / f"proxy-{name}-{n}.log", "wb")  # noqa: SIM115
        process = subprocess.Popen(
            serve_command(port, self.policies, self.upstream_url, usage_log,
                          "--state", self.redis.url),
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, **self.env},
        )  # fmt: skip
        out.close()
        replica = Replica(name, f"http://127.0.0.1:{port}", process, usage_log)
        self.replicas.append(replica)
        wait_ready(replica.url, process)
        return replica

    def kill(self, replica: Replica, sig: int = signal.SIGKILL, wait_s: float = 30) -> int:
        replica.process.send_signal(sig)
        return replica.process.wait(timeout=wait_s)

    def stop_all(self) -> None:
        for replica in self.replicas:
            if replica.alive():
                replica.process.kill()
                replica.process.wait()

    def rows(self) -> list[dict[str, Any]]:
        return [row for replica in self.replicas for row in replica.rows()]

    def counter(self, team: str, prefix: str = "cp:quota:", period: str | None = None) -> int:
        """The team's counter in Redis for `period` ("YYYY-MM-DD" or "YYYY-MM"; default: this
        UTC month)."""
        period = period or datetime.now(UTC).strftime("%Y-%m")
        key = f"{prefix}{team}:{'d' if len(period) == 10 else 'm'}:{period}"
        with redis.Redis.from_url(self.redis.url, decode_responses=True) as client:
            return int(client.get(key) or 0)


def periods(rows: Iterable[dict[str, Any]]) -> tuple[str, str]:
    """The day and month of the newest row: the periods whose counters a check compares (a
    run that crossed midnight compares the new day's; the old one is no quota's any more)."""
    newest = max(str(r.get("ts", "")) for r in rows)
    return newest[:10], newest[:7]


def _of(rows: Iterable[dict[str, Any]], team: str, period: str) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("team") == team and str(r.get("ts", "")).startswith(period)]


def charged(rows: Iterable[dict[str, Any]], team: str, period: str = "") -> int:
    """The tokens the team's usage rows charged (in `period`, "YYYY-MM-DD" or "YYYY-MM")."""
    return sum(int(r.get("total_tokens") or 0) for r in _of(rows, team, period))


def charged_micro_usd(rows: Iterable[dict[str, Any]], team: str, period: str = "") -> int:
    """The team's spend as the rows charged it, in millionths of a dollar (each row rounded
    as it is counted)."""
    return sum(round(float(r.get("cost_usd") or 0) * 1_000_000) for r in _of(rows, team, period))


def until(condition: Callable[[], bool], what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.05)


def steady(read: Callable[[], int], quiet_s: float = 1.5, seconds: float = 20) -> int:
    """`read()` once it has kept one value for `quiet_s` (the replicas' syncs are done)."""
    deadline = time.monotonic() + seconds
    last, since = read(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = read()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return now
    return last


async def paced(
    rate: float, seconds: float, send: Callable[[httpx.AsyncClient, int], Any]
) -> list[Any]:
    """`send(client, n)` started every 1/`rate` s for `seconds` (not waiting for answers);
    every outcome, in the order they were started."""
    tasks = []
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=200)) as client:
        began = time.monotonic()
        n = 0
        while (at := began + n / rate) < began + seconds:
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            tasks.append(asyncio.create_task(send(client, n)))
            n += 1
        return list(await asyncio.gather(*tasks, return_exceptions=True))


def chat_body(n: int, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": f"q{n}"}], **extra}


def sigterm(replica: Replica) -> None:
    replica.process.send_signal(signal.SIGTERM)
