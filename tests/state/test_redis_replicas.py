"""Two real `python -m proxy serve --state redis://...` processes sharing one real Redis."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import httpx
import pytest
import redis
import yaml

from proxy.policy.load import load_policy_dir
from tests.conftest import free_port
from tests.fake_upstream import FakeUpstream
from tests.processes import serve_command, wait_ready
from tests.redis_server import RedisServer, running_redis

SMALL = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
TOKENS = 18  # the fake upstream's usage.total_tokens for every answer
DEADLINE_S = 20  # for conditions that hold after a sync interval (0.5 s) or two

Launch = Callable[[Path], str]


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    folder = tmp_path / "redis"
    folder.mkdir()
    yield from running_redis(folder)


@pytest.fixture
def replica(tmp_path: Path, upstream_url: str, redis_server: RedisServer) -> Iterator[Launch]:
    """Start one more proxy process on the shared Redis; each has its own usage log."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(policies: Path) -> str:
        port = free_port()
        usage_log = tmp_path / f"usage-{port}.jsonl"
        process = subprocess.Popen(
            serve_command(port, policies, upstream_url, usage_log, "--state", redis_server.url),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=Path(__file__).resolve().parents[2],
        )
        processes.append(process)
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, process)
        return url

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def policies(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "policies"
    folder.mkdir(exist_ok=True)
    (folder / "default.yaml").write_text(text)
    return folder


def chat(url: str, body: object = SMALL) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=30)


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.05)


def shared_total(server: RedisServer) -> int:
    """The team's daily tokens in Redis (summed over days, so midnight cannot flake it)."""
    with redis.Redis.from_url(server.url, decode_responses=True) as client:
        keys = client.keys("cp:quota:default:d:*")
        return sum(int(v) for v in client.mget(keys)) if keys else 0


def has_total(server: RedisServer, tokens: int) -> bool:
    return shared_total(server) == tokens


def refuses(url: str) -> bool:
    return chat(url).status_code == 429


def summaries(server: RedisServer) -> list[str]:
    """The stored summaries' keys (locks have their own prefix)."""
    with redis.Redis.from_url(server.url, decode_responses=True) as client:
        return list(client.keys("cp:summary:*"))


def metric(url: str, name: str) -> float | None:
    text = httpx.get(url + "/metrics").text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else None


def until_metric(url: str, name: str, value: float) -> None:
    def reached() -> bool:
        return metric(url, name) == value

    until(reached, f"{name} == {value} at {url}")


UP = 'context_proxy_shared_state_up{backend="redis"}'
SEEN = 'context_proxy_shared_quota_tokens{period="day",team="default"}'


def test_a_hard_quota_spent_through_both_replicas_stops_both(
    tmp_path: Path, replica: Launch, redis_server: RedisServer, upstream: FakeUpstream
) -> None:
    # 50 tokens: two answers (36) fit on either replica alone, four (72) do not.
    folder = policies(tmp_path, "quotas: {daily_tokens: 50, hard_limit: true}\n")
    a, b = replica(folder), replica(folder)
    assert [chat(a).status_code, chat(a).status_code] == [200, 200]
    for _ in range(2):
        chat(b)  # 200, or 429 once b has read a's tokens
    for url in (a, b):
        until(partial(refuses, url), f"{url} refuses the spent quota")
    refused = chat(a)
    assert refused.json()["error"]["code"] == "quota_exceeded"
    assert chat(b).status_code == 429
    forwarded = len(upstream.chat_requests)
    assert forwarded >= 3  # the quota was spent through both
    until(partial(has_total, redis_server, forwarded * TOKENS), "every answer counted once")


def test_redis_stopped_and_restarted_proxies_keep_serving_and_catch_up(
    tmp_path: Path, replica: Launch, redis_server: RedisServer, upstream: FakeUpstream
) -> None:
    folder = policies(tmp_path, "quotas: {daily_tokens: 1000000}\n")
    a, b = replica(folder), replica(folder)
    sent = 0
    # Redis with persistence (data kept), then without (data lost): both catch up exactly.
    for save in (True, False):
        for url in (a, b):
            assert chat(url).status_code == 200
            sent += 1
        for url in (a, b):
            until_metric(url, SEEN, sent * TOKENS)  # it read the other's tokens: floor current
        redis_server.stop(save=save)
        for url in (a, b, a, b):
            assert chat(url).status_code == 200  # served on local counting
            sent += 1
        for url in (a, b):
            until_metric(url, UP, 0)
        redis_server.start()
        until(partial(has_total, redis_server, sent * TOKENS), "the counts catch up")
        for url in (a, b):
            until_metric(url, UP, 1)
            until_metric(url, SEEN, sent * TOKENS)
    assert len(upstream.chat_requests) == sent


def long_conversation(turns: int = 12) -> dict[str, object]:
    messages: list[dict[str, str]] = [{"role": "system", "content": "You are helpful."}]
    for i in range(turns):
        words = " ".join(f"fact{i}x{j}" for j in range(60))
        messages.append({"role": "user", "content": f"Turn {i}: remember {words}."})
        messages.append({"role": "assistant", "content": f"Noted turn {i}: {words}."})
    messages.append({"role": "user", "content": "What did we agree on?"})
    return {"model": "gpt-4o", "messages": messages}


def test_a_summary_made_by_one_replica_is_used_by_the_other(
    tmp_path: Path, replica: Launch, redis_server: RedisServer, upstream: FakeUpstream
) -> None:
    folder = policies(
        tmp_path,
        "models: {gpt-4o: {context_window: 2000}}\n"
        "history: {keep_recent: 2, relevance: 'off'}\n"
        "summaries: {enabled: true, chunk_turns: 2}\n",
    )
    a, b = replica(folder), replica(folder)
    body = long_conversation()
    first = chat(a, body)
    assert first.status_code == 200 and int(first.headers["x-context-trimmed"]) > 0
    assert b"SUMMARY-FROM-FAKE" not in upstream.chat_requests[-1].body  # none made yet

    def settled() -> bool:  # every summary call finished, and each one stored
        made = len(upstream.summary_requests)
        return made > 0 and upstream.summary_active == 0 and len(summaries(redis_server)) == made

    until(settled, "a has made and stored its summaries")
    second = chat(b, body)  # b's first request: whatever it holds came through Redis
    assert second.status_code == 200
    assert b"SUMMARY-FROM-FAKE" in upstream.chat_requests[-1].body
    # No span was paid for twice: one summary call per stored summary, whoever made it.
    until(settled, "b is done too")


def test_the_deploy_examples_configure_shared_state_and_valid_policies(tmp_path: Path) -> None:
    deploy = Path(__file__).resolve().parents[2] / "deploy"
    compose = yaml.safe_load((deploy / "docker-compose.yml").read_text())
    proxy = compose["services"]["proxy"]
    assert proxy["environment"]["CONTEXT_PROXY_STATE"] == "redis://redis:6379/0"
    assert proxy["deploy"]["replicas"] > 1 and "redis" in compose["services"]
    assert "server-template proxy" in (deploy / "haproxy.cfg").read_text()
    docs = [
        doc
        for f in sorted((deploy / "k8s").glob("*.yaml"))
        for doc in yaml.safe_load_all(f.read_text())
    ]
    kinds = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    pods = kinds["StatefulSet", "context-proxy"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pods["containers"][0]["env"]}
    # Redis's password, from its Secret (tests/deploy/test_k8s.py checks the rest).
    assert env["CONTEXT_PROXY_STATE"] == "redis://:$(REDIS_PASSWORD)@context-proxy-redis:6379/0"
    assert ("Service", "context-proxy-redis") in kinds and ("Service", "context-proxy") in kinds
    for name, text in kinds["ConfigMap", "context-proxy-policies"]["data"].items():
        (tmp_path / name).write_text(text)
    load_policy_dir(str(tmp_path))  # raises PolicyError with file:line on a bad policy


@pytest.mark.parametrize(
    ("quota", "charged"),
    [("daily_tokens: 5000", "total_tokens"), ("daily_usd: 0.05", "cost_usd")],
)
def test_sixty_requests_at_once_through_two_replicas_overshoot_by_one_request_at_most(
    tmp_path: Path, replica: Launch, upstream: FakeUpstream, quota: str, charged: str
) -> None:
    """Each admitted request reserves its prompt and answer limit in Redis against the
    fleet's counts and holds: two replicas admitting at once cannot each spend the quota
    (each admitted a whole one when holds were the replica's own)."""
    import asyncio

    import orjson

    folder = policies(tmp_path, f"quotas: {{{quota}, hard_limit: true}}\n")
    urls = [replica(folder), replica(folder)]
    upstream.mode, upstream.delay_s = "sized_usage", 0.5
    body = {"model": "gpt-4o", "max_tokens": 1000,
            "messages": [{"role": "user", "content": "lorem " * 800}]}  # fmt: skip

    async def burst() -> list[int]:
        async with httpx.AsyncClient(timeout=30) as http:
            answers = await asyncio.gather(*(
                http.post(urls[k % 2] + "/v1/chat/completions", json=body) for k in range(60)
            ))  # fmt: skip
            return [a.status_code for a in answers]

    statuses = asyncio.run(burst())
    assert statuses.count(200) >= 1 and statuses.count(429) >= 40, statuses

    def rows() -> list[dict[str, object]]:
        lines = b"".join(p.read_bytes() for p in tmp_path.glob("usage-*.jsonl"))
        return [orjson.loads(line) for line in lines.splitlines() if line]

    until(lambda: len(rows()) == 60, "every request's row")
    spent = [float(r[charged] or 0) for r in rows() if r["status"] == 200]  # type: ignore[arg-type]
    limit = 5000 if charged == "total_tokens" else 0.05
    assert sum(spent) <= limit + max(spent), (sum(spent), len(spent))
