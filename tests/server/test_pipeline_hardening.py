"""Issues 15 and 16: bounded labels and rows, whole usage lines through a full disk, bounded
estimates, one Content-Type upstream, no charge without an answer, refusals with figures,
preloaded tokenizers, no _created series, plan endpoint errors."""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.policy.model import hash_key
from proxy.server.pipeline import plan_step
from proxy.server.pipeline.estimates import EXACT_CHARS, estimate_completion
from proxy.server.pipeline.plan_step import plan_in_thread, tag_marks
from proxy.tokens import text as token_text
from proxy.usage.ledger import UsageRecord
from proxy.usage.metrics import Metrics
from tests.conftest import RunningProxy, free_port, serve
from tests.fake_upstream import FakeUpstream

SMALL = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Say hello."}]}


def rows(proxy: RunningProxy, at_least: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 10
    while True:
        path = proxy.usage_path
        found = [orjson.loads(x) for x in path.read_bytes().splitlines()] if path.exists() else []
        if len(found) >= at_least or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_hostile_model_names_keep_metrics_and_usage_log_bounded(
    start_proxy: Any, policies_dir: Path
) -> None:
    (policies_dir / "default.yaml").write_text(f'keys: ["{hash_key("k1")}"]\nmetrics: public\n')
    proxy = start_proxy()
    with httpx.Client(base_url=proxy.url, timeout=30) as http:
        for i in range(1000):  # distinct 100 KB names, half with the key, half without
            body = {**SMALL, "model": secrets.token_hex(50_000)}
            headers = {"authorization": "Bearer k1"} if i % 2 else {}
            r = http.post("/v1/chat/completions", content=orjson.dumps(body), headers=headers)
            assert r.status_code == (400 if i % 2 else 401)
        for i in range(100):  # distinct plausible names that reach the upstream
            body = {**SMALL, "model": f"made-up-model-{i}-" + "x" * 100}
            r = http.post("/v1/chat/completions", json=body, headers={"authorization": "Bearer k1"})
            assert r.status_code == 200
        metrics = http.get("/metrics").content
    assert len(metrics) < 512 * 1024
    assert b"made-up-model" not in metrics and b'model="other"' in metrics
    assert b'model="unauthenticated"' in metrics and b'model="invalid"' in metrics
    logged = rows(proxy, 1100)
    lines = proxy.usage_path.read_bytes().splitlines()
    assert len(logged) == 1100
    assert max(len(x) for x in lines[:1000]) < 1024  # a bounded row per rejected request
    assert {r["model"] for r in logged[:1000]} == {""}
    assert {r["team"] for r in logged[:1000:2]} == {"unknown"}


def test_completion_estimate_counts_a_bounded_prefix() -> None:
    seen: list[int] = []

    class Counting:
        def count_text(self, text: str) -> int:
            seen.append(len(text))
            return len(text) // 3

    huge = "z" * 20_000_000
    estimate = estimate_completion(Counting(), huge)  # type: ignore[arg-type]
    assert max(seen) <= EXACT_CHARS
    assert estimate >= len(huge) // 4  # at least a token per 4 characters
    assert estimate_completion(Counting(), "abcdef") == 2  # type: ignore[arg-type]


def test_an_answer_without_usage_is_estimated_quickly(
    proxy: RunningProxy, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Through monkeypatch: the session's fake upstream does not reset its reply text.
    monkeypatch.setattr(
        upstream, "reply_text", "".join(random.Random(7).choices("ab\u00e9\u4e2d ", k=3_000_000))
    )
    started = time.monotonic()
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        json=SMALL,
        headers={"x-fake-mode": "no_usage"},
        timeout=60,
    )
    elapsed = time.monotonic() - started
    assert r.status_code == 200
    row = rows(proxy, 1)[-1]
    assert row["usage_source"] == "estimated" and row["completion_tokens"] > 500_000
    assert elapsed < 10  # counting it whole on the loop took far longer


class RawHeaders:
    """An ASGI upstream that records each request's raw header list."""

    def __init__(self) -> None:
        self.seen: list[list[tuple[bytes, bytes]]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.seen.append(list(scope["headers"]))
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        answer = orjson.dumps(
            {
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1},
            }
        )
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": answer})


def test_one_content_type_and_length_go_upstream(start_proxy: Any) -> None:
    app = RawHeaders()
    with serve(app) as url:
        proxy = start_proxy(upstream=url + "/v1")
        r = httpx.post(
            proxy.url + "/v1/chat/completions",
            content=orjson.dumps(SMALL),
            headers={"content-type": "application/json; charset=utf-8"},
        )
    assert r.status_code == 200
    names = [k.lower() for k, _ in app.seen[-1]]
    assert names.count(b"content-type") == 1 and names.count(b"content-length") == 1


def test_requests_never_answered_charge_no_quota(
    start_proxy: Any, policies_dir: Path, upstream: FakeUpstream, upstream_url: str
) -> None:
    (policies_dir / "default.yaml").write_text(
        "quotas: {daily_tokens: 1000000}\nupstream: {timeout_s: 0.5, retries: 0}\n"
    )
    dead = start_proxy(upstream=f"http://127.0.0.1:{free_port()}/v1")
    r = httpx.post(dead.url + "/v1/chat/completions", json=SMALL, timeout=30)
    assert r.status_code == 502
    slow = start_proxy(upstream=upstream_url, usage_log=str(policies_dir.parent / "slow.jsonl"))
    r = httpx.post(
        slow.url + "/v1/chat/completions", json=SMALL, headers={"x-fake-mode": "hang"}, timeout=30
    )
    assert r.status_code == 504
    for proxy in (dead, slow):
        row = rows(proxy, 1)[-1]
        assert row["total_tokens"] == 0 and row["prompt_tokens"] == 0 and row["quota_used"] == 0


def test_a_refusal_for_length_carries_its_figures(start_proxy: Any, policies_dir: Path) -> None:
    (policies_dir / "default.yaml").write_text(
        "models: {gpt-4o: {context_window: 1000}}\nbudget: {on_required_overflow: reject}\n"
    )
    proxy = start_proxy()
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "word " * 3000}]}
    r = httpx.post(proxy.url + "/v1/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    h = r.headers
    assert h["x-context-level"] == "critical" and h["x-context-window"] == "1000"
    assert h["x-context-budget"] == "800" and int(h["x-context-tokens-before"]) > 2900
    row = rows(proxy, 1)[-1]
    assert row["budget"] == 800 and row["context_window"] == 1000
    assert row["tokens_before"] > 2900 and row["level"] == "critical"
    bad = httpx.post(proxy.url + "/v1/chat/completions", content=b"{nope")
    assert bad.status_code == 400
    assert rows(proxy, 2)[-1]["team"] == "default"  # open mode: the open policy's team


def test_the_first_request_waits_for_no_encoding_load(
    start_proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads: list[str] = []
    real = token_text.load_encoding

    def counted(name: str) -> Any:
        loads.append(name)
        return real(name)

    monkeypatch.setattr("proxy.tokens.counter.load_encoding", counted)
    proxy = start_proxy()
    # The first request goes the moment the server answers: nothing waited for the loads.
    before = list(loads)
    assert sorted(before) == ["cl100k_base", "o200k_base"]
    r = httpx.post(proxy.url + "/v1/chat/completions", json=SMALL, timeout=30)
    assert r.status_code == 200 and loads == before  # no load on the request's path


def test_metrics_have_no_created_series() -> None:
    m = Metrics()
    m.observe_record(UsageRecord(team="t", model="gpt-4o", status=200, latency_ms=3.0))
    body, _ = m.render()
    assert b"context_proxy_requests_total" in body and b"_created" not in body


def test_tag_heavy_or_large_bodies_are_planned_off_the_loop() -> None:
    class Unseen:
        def seen(self, messages: Any) -> bool:
            return False

    block = b'<context section="memory">x</context>'
    assert tag_marks(block * 100) == 100
    small: dict[str, Any] = {"messages": []}
    assert plan_in_thread(small, Unseen(), 10_000, tags=100)  # type: ignore[arg-type]
    assert plan_in_thread(small, Unseen(), 100_000)  # type: ignore[arg-type]
    assert not plan_in_thread(small, Unseen(), 10_000)  # type: ignore[arg-type]


def test_healthz_answers_while_hostile_bodies_are_planned(proxy: RunningProxy) -> None:
    block = '<context section="memory" id="m">note</context> '
    body = orjson.dumps(
        {"model": "gpt-4o", "messages": [{"role": "user", "content": block * 20}] * 800}
    )
    assert len(body) < 1024 * 1024

    def hostile() -> None:
        httpx.post(proxy.url + "/v1/context/plan", content=body, timeout=120)

    workers = [threading.Thread(target=hostile) for _ in range(3)]
    for w in workers:
        w.start()
    worst = 0.0
    try:
        # One client, connected before: creating one (its TLS context) alone takes ~0.1 s.
        with httpx.Client(base_url=proxy.url, timeout=5) as http:
            assert http.get("/healthz").status_code == 200
            time.sleep(0.2)
            for _ in range(5):
                started = time.monotonic()
                assert http.get("/healthz").status_code == 200
                worst = max(worst, time.monotonic() - started)
                time.sleep(0.05)
    finally:
        for w in workers:
            w.join()
    assert worst < 0.5


def test_plan_endpoint_answers_400_for_a_bad_shape_and_500_shaped_for_a_bug(
    proxy: RunningProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("boom")

    monkeypatch.setattr(plan_step, "plan_request", broken)
    bad = {"model": "gpt-4o", "messages": [{"role": "user", "content": 5}]}
    r = httpx.post(proxy.url + "/v1/context/plan", json=bad)
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert r.json()["error"]["param"] == "messages[0].content"
    r = httpx.post(proxy.url + "/v1/context/plan", json=SMALL)
    assert r.status_code == 500 and set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_usage_log_failing_shows_in_healthz_and_metrics(
    proxy: RunningProxy, monkeypatch: pytest.MonkeyPatch
) -> None:

    real = os.write
    target = str(proxy.usage_path)

    def full(fd: int, data: Any) -> int:
        if os.readlink(f"/proc/self/fd/{fd}") == target:
            raise OSError(28, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr("proxy.usage.writer.os.write", full)
    assert httpx.post(proxy.url + "/v1/chat/completions", json=SMALL).status_code == 200
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        health = httpx.get(proxy.url + "/healthz")
        if health.json().get("status") != "ok":
            break
        time.sleep(0.02)
    assert health.status_code == 200
    assert health.json() == {"status": "degraded", "usage_log": "failing"}
    text = httpx.get(proxy.url + "/metrics").text
    assert "context_proxy_usage_write_failures_total 1.0" in text
    monkeypatch.setattr("proxy.usage.writer.os.write", real)
    deadline = time.monotonic() + 10
    while httpx.get(proxy.url + "/healthz").json()["status"] != "ok":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert len(rows(proxy, 1)) == 1  # the kept row was written once the disk had room


async def test_a_short_write_leaves_no_partial_line_and_loses_no_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.usage.ledger import UsageLog, iter_records

    p = tmp_path / "u.jsonl"
    log = UsageLog(str(p))
    await log.start()
    real = os.write
    state = {"full": True}

    def nearly_full(fd: int, data: Any) -> int:
        if not state["full"]:
            return real(fd, data)
        if len(data) > 10:  # room for 10 bytes, then none
            return real(fd, bytes(data[:10]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("proxy.usage.writer.os.write", nearly_full)
    log.write(UsageRecord(request_id="req-1"))
    while log.write_failures == 0:
        await asyncio.sleep(0.01)
    assert p.read_bytes() == b""  # the 10 bytes written were taken back
    state["full"] = False
    log.write(UsageRecord(request_id="req-2"))
    await log.aclose()
    lines = p.read_bytes().splitlines()
    assert [orjson.loads(x)["request_id"] for x in lines] == ["req-1", "req-2"]
    assert [r["request_id"] for r in iter_records(str(p))] == ["req-1", "req-2"]
    assert log.dropped == 0
