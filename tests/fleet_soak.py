"""A fleet soak: two `proxy serve --state` replicas on one real Redis under a mixed load with
faults, for a bounded time.

The load (paced, round-robin over the replicas that are up, as a load balancer would):
small, streamed, trimmed and Responses requests; clients that drop a stream; upstream 500s,
upstream timeouts and streams the upstream cuts; four teams (no hard limit, a hard quota
never reached, a hard quota spent early, a rate limit). The faults, at fixed points of the
run: Redis restarted empty three times, a burst of malformed bodies, one replica SIGKILLed
and the other SIGTERMed under load, each started again. Beside it /healthz is probed every
0.1 s and each replica's RSS read every second. The figures are judged in
fleet_soak_checks.py. Run by tests/state/test_fleet_soak.py and tests/bench/soak_fleet.py.
"""

from __future__ import annotations

import asyncio
import random
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.fake_upstream import FakeUpstream
from tests.redis_server import RedisServer
from tests.state.fleet import Fleet, Replica, team_policies

WINDOW = "models: {gpt-4o: {context_window: 2000}}\nupstream: {timeout_s: 2}\n"
RATED_PER_MINUTE = 60
CAPPED_TOKENS = 1000
TEAMS = {
    "plain": WINDOW + "quotas: {daily_tokens: 1000000000}\nmetrics: public",
    "held": WINDOW + "quotas: {daily_tokens: 1000000000, daily_usd: 100000, hard_limit: true}",
    "capped": WINDOW + f"quotas: {{daily_tokens: {CAPPED_TOKENS}, hard_limit: true}}",
    "rated": WINDOW + f"rate_limits: {{requests_per_minute: {RATED_PER_MINUTE}}}",
}
TEAM_WEIGHTS = [("plain", 50), ("held", 25), ("capped", 10), ("rated", 15)]
KINDS = [
    ("plain", 30), ("stream", 20), ("trimmed", 8), ("stream_trimmed", 5), ("responses", 8),
    ("responses_stream", 4), ("dropped", 5), ("upstream_500", 4), ("timeout", 2), ("cut", 4),
]  # fmt: skip
FILLER = " ".join(f"word{i}" for i in range(250))
# The faults, at these shares of the run.
REDIS_RESTARTS = (0.15, 0.55, 0.85)
MALFORMED_AT, MALFORMED_BURST = 0.30, 40
KILL_AT, TERM_AT = 0.40, 0.70
REDIS_DOWN_S = 1.0
RECOVERY_LIMIT_S = 30.0  # a recovery longer than this is recorded as such, and fails
UP = re.compile(r'^context_proxy_shared_state_up\{backend="redis"\} 1(\.0)?$', re.MULTILINE)


@dataclass
class Outcome:
    """One request as its client saw it."""

    t0: float
    t1: float
    replica: str  # name and incarnation, e.g. "a1"
    team: str
    kind: str
    status: int | str  # the HTTP status, or what went wrong on the way
    request_id: str | None  # x-request-id, when the answer's head came
    whole: bool  # the answer was read to its end (a dropped stream is left on purpose)


@dataclass
class Soak:
    """One run's fleet, load, faults and what was measured."""

    tmp: Path
    redis: RedisServer
    upstream: FakeUpstream
    upstream_url: str
    duration_s: float
    rate: float
    fleet: Fleet = field(init=False)
    keys: dict[str, str] = field(init=False)
    live: dict[str, Replica] = field(default_factory=dict)  # name -> the incarnation serving
    incarnation: dict[str, str] = field(default_factory=dict)  # name -> e.g. "a2"
    outcomes: list[Outcome] = field(default_factory=list)
    probes: list[tuple[float, str, float, int]] = field(default_factory=list)
    rss: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    redis_recovery_s: list[float] = field(default_factory=list)
    replica_recovery_s: list[float] = field(default_factory=list)
    kills: dict[str, float] = field(default_factory=dict)  # incarnation -> when SIGKILLed
    kill_walls: dict[str, float] = field(default_factory=dict)  # the same, as Unix time
    processes: dict[str, Replica] = field(default_factory=dict)  # incarnation -> its process
    exits: dict[str, int] = field(default_factory=dict)  # incarnation -> exit code on SIGTERM
    began: float = 0.0

    def __post_init__(self) -> None:
        self.fleet = Fleet(self.tmp, self.redis, self.upstream_url, self.tmp / "policies")
        self.keys = team_policies(self.fleet.policies, TEAMS)

    def start(self, name: str) -> float:
        n = int(self.incarnation.get(name, name + "0")[1:]) + 1
        began = time.monotonic()
        replica = self.fleet.start(name)
        self.incarnation[name] = f"{name}{n}"
        self.processes[f"{name}{n}"] = replica
        self.live[name] = replica
        return time.monotonic() - began

    def run(self) -> None:
        self.upstream.status = 500  # what "error" answers
        self.start("a")
        self.start("b")
        stop = threading.Event()
        watch = threading.Thread(target=self._watch, args=(stop,), daemon=True)
        self.began = time.monotonic()
        watch.start()
        try:
            asyncio.run(self._drive())
        finally:
            stop.set()
            watch.join(5)
        time.sleep(1.0)  # the last bookings and syncs
        for name in ("b", "a"):  # a graceful end: every row and count handed over
            self._terminate(name)

    async def _drive(self) -> None:
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=400)) as c:
            await asyncio.gather(self._load(c), self._faults(c))

    async def _load(self, client: httpx.AsyncClient) -> None:
        rng = random.Random(59)
        teams, team_w = zip(*TEAM_WEIGHTS, strict=True)
        kinds, kind_w = zip(*KINDS, strict=True)
        tasks, n = [], 0
        while (at := self.began + n / self.rate) < self.began + self.duration_s:
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            team, kind = rng.choices(teams, team_w)[0], rng.choices(kinds, kind_w)[0]
            tasks.append(asyncio.create_task(self._one(client, n, team, kind)))
            n += 1
        await asyncio.gather(*tasks)

    def _pick(self, n: int) -> tuple[str, Replica]:
        while True:  # the fault thread may take one out meanwhile
            names = sorted(self.live)
            name = names[n % len(names)]
            replica, who = self.live.get(name), self.incarnation[name]
            if replica is not None:
                return who, replica

    async def _one(self, client: httpx.AsyncClient, n: int, team: str, kind: str) -> None:
        who, replica = self._pick(n)
        path, body, headers = request_for(kind, n, self.keys[team])
        t0, rid, whole = time.monotonic(), None, False
        status: int | str
        try:
            async with client.stream("POST", replica.url + path, json=body, headers=headers) as r:
                rid, status = r.headers.get("x-request-id"), r.status_code
                if kind == "dropped" and r.status_code == 200:
                    async for _ in r.aiter_raw():
                        break  # and leave
                else:
                    await r.aread()
                    whole = True
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        self.outcomes.append(Outcome(t0, time.monotonic(), who, team, kind, status, rid, whole))

    async def _faults(self, client: httpx.AsyncClient) -> None:
        events = [(s, "redis") for s in REDIS_RESTARTS]
        events += [(MALFORMED_AT, "malformed"), (KILL_AT, "kill"), (TERM_AT, "term")]
        for share, what in sorted(events):
            await asyncio.sleep(max(0.0, self.began + share * self.duration_s - time.monotonic()))
            if what == "redis":
                await asyncio.to_thread(self._restart_redis)
            elif what == "malformed":
                await self._malformed(client)
            elif what == "kill":
                await asyncio.to_thread(self._kill, "a")
            else:
                await asyncio.to_thread(self._term_and_restart, "b")

    def _restart_redis(self) -> None:
        before = self.fleet.counter("held")
        self.redis.stop()  # without persistence: everything in it is lost
        time.sleep(REDIS_DOWN_S)
        self.redis.start()
        back = time.monotonic()
        # Back: every replica says so, and the fleet's counts are handed back.
        while not (self._all_up() and self.fleet.counter("held") >= before):
            if time.monotonic() - back > RECOVERY_LIMIT_S:
                break
            time.sleep(0.02)
        self.redis_recovery_s.append(time.monotonic() - back)

    def _all_up(self) -> bool:
        try:
            texts = [httpx.get(r.url + "/metrics").text for r in list(self.live.values())]
        except httpx.HTTPError:
            return False
        return all(UP.search(text) for text in texts)

    async def _malformed(self, client: httpx.AsyncClient) -> None:
        async def bad(n: int) -> None:
            who, replica = self._pick(n)
            headers = {"authorization": f"Bearer {self.keys['plain']}"}
            t0 = time.monotonic()
            r = await client.post(replica.url + "/v1/chat/completions", content=b'{"model": 5',
                                  headers=headers)  # fmt: skip
            rid = r.headers.get("x-request-id")
            self.outcomes.append(
                Outcome(t0, time.monotonic(), who, "plain", "malformed", r.status_code, rid, True)
            )

        await asyncio.gather(*(bad(n) for n in range(MALFORMED_BURST)))

    def _kill(self, name: str) -> None:
        replica, who = self.live[name], self.incarnation[name]
        began, wall = time.monotonic(), time.time()
        replica.process.send_signal(signal.SIGKILL)
        replica.process.wait()
        self.kills[who], self.kill_walls[who] = began, wall
        del self.live[name]  # the balancer sees it gone
        self.start(name)
        self.replica_recovery_s.append(time.monotonic() - began)

    def _terminate(self, name: str) -> None:
        replica, who = self.live.pop(name), self.incarnation[name]
        replica.process.send_signal(signal.SIGTERM)
        self.exits[who] = replica.process.wait(timeout=60)

    def _term_and_restart(self, name: str) -> None:
        began = time.monotonic()
        self._terminate(name)  # taken out of the balancer first, then drained
        self.start(name)
        self.replica_recovery_s.append(time.monotonic() - began)

    def _watch(self, stop: threading.Event) -> None:
        """/healthz of every replica up every 0.1 s; RSS every second."""
        next_rss = 0.0
        with httpx.Client(timeout=10) as client:
            while not stop.wait(0.1):
                for name, replica in list(self.live.items()):
                    who = self.incarnation.get(name, name)
                    t0 = time.monotonic()
                    try:
                        status = client.get(replica.url + "/healthz").status_code
                    except httpx.HTTPError:
                        status = 0
                    if name in self.live and self.live[name] is replica:  # not stopped meanwhile
                        self.probes.append((t0 - self.began, who, time.monotonic() - t0, status))
                    if t0 >= next_rss:
                        self.rss.setdefault(who, []).append((t0 - self.began, rss_mb(replica.pid)))
                if time.monotonic() >= next_rss:
                    next_rss = time.monotonic() + 1.0


def request_for(kind: str, n: int, key: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    """A request of `kind`: its path, body and headers (the fake upstream's mode among them)."""
    headers = {"authorization": f"Bearer {key}"}
    messages: list[dict[str, str]] = [{"role": "user", "content": f"question {n % 500}?"}]
    if "trimmed" in kind:
        history = [
            {"role": "user" if t % 2 == 0 else "assistant", "content": f"{t} {FILLER}"}
            for t in range(10)
        ]
        messages = history + messages
    stream = "stream" in kind or kind in ("dropped", "cut")
    mode = {"upstream_500": "error", "timeout": "hang", "cut": "break"}.get(kind)
    if mode:
        headers["x-fake-mode"] = mode
    if kind.startswith("responses"):
        return "/v1/responses", {"model": "gpt-4o", "input": messages, "stream": stream}, headers
    body: dict[str, Any] = {"model": "gpt-4o", "messages": messages, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return "/v1/chat/completions", body, headers


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0
