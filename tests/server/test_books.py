"""Books: finished exchanges are booked in batches, and drained wherever exact books matter."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import orjson
import pytest

from proxy.errors import QuotaExceeded
from proxy.policy import PolicyStore
from proxy.server.core import books
from proxy.server.core.books import Books
from proxy.server.core.services import open_services
from proxy.server.core.settings import Settings
from proxy.server.pipeline.exchange import Exchange
from proxy.server.pipeline.quota_step import check_quota
from proxy.tokens import ContextWindows
from proxy.usage import Metrics, QuotaBook, ThresholdWatch, UsageRecord, utc_iso
from tests.conftest import RunningProxy


class Sink:
    def __init__(self) -> None:
        self.rows: list[UsageRecord] = []

    def write(self, record: UsageRecord) -> None:
        self.rows.append(record)


def services_for(tmp_path: Path, policy_text: str = "") -> Any:
    (tmp_path / "default.yaml").write_text(policy_text)
    policy = PolicyStore.load(str(tmp_path)).current.default
    services = SimpleNamespace(
        quotas=QuotaBook(), spend=QuotaBook(), thresholds=ThresholdWatch(), metrics=Metrics(),
        windows=ContextWindows(), usage=Sink(), books=Books(), shared=None, shared_spend=None,
    )  # fmt: skip
    return services, policy


def answered(policy: Any, request_id: str, tokens: int = 100) -> Exchange:
    ex = Exchange(request_id, policy=policy, model="gpt-4o")
    ex.answered = True
    ex.take_usage({"prompt_tokens": tokens - 10, "completion_tokens": 10})
    return ex


async def test_rows_wait_for_the_batch_then_come_in_order(tmp_path: Path) -> None:
    services, policy = services_for(tmp_path)
    for k in range(5):
        answered(policy, f"req_{k}").finish(services, 200)
    assert services.usage.rows == [] and services.books.pending == 5  # not yet: batched
    await asyncio.sleep(books.DRAIN_S + 0.05)
    assert [r.request_id for r in services.usage.rows] == [f"req_{k}" for k in range(5)]
    assert services.books.pending == 0
    assert services.quotas.used("default")[0] == 500


async def test_a_full_batch_is_booked_at_once(tmp_path: Path) -> None:
    services, policy = services_for(tmp_path)
    for k in range(books.MAX_PENDING):
        answered(policy, f"req_{k}").finish(services, 200)
    assert services.usage.rows == []  # not on the request's path: its answer goes out first
    await asyncio.sleep(0)  # the loop is back
    assert len(services.usage.rows) == books.MAX_PENDING
    assert services.books.pending == 0


async def test_the_row_keeps_the_time_the_request_ended(tmp_path: Path) -> None:
    services, policy = services_for(tmp_path)
    ex = answered(policy, "req_t")
    ex.finish(services, 200)
    await asyncio.sleep(books.DRAIN_S + 0.05)  # booked later, stamped as it ended
    [row] = services.usage.rows
    assert row.ts == utc_iso(ex.ended_at)


async def test_a_quota_check_counts_the_requests_just_finished(tmp_path: Path) -> None:
    services, policy = services_for(tmp_path, "quotas: {daily_tokens: 150, hard_limit: true}\n")
    answered(policy, "req_1").finish(services, 200)
    answered(policy, "req_2").finish(services, 200)
    assert services.books.pending == 2
    nxt = Exchange("req_3", policy=policy, model="gpt-4o")
    with pytest.raises(QuotaExceeded):  # 200 of 150 used: the waiting rows were booked first
        check_quota(services, nxt)
    assert services.books.pending == 0 and len(services.usage.rows) == 2


async def test_one_failing_row_costs_no_other_its_row(tmp_path: Path, caplog: Any) -> None:
    services, policy = services_for(tmp_path)
    bad = answered(policy, "req_bad")
    bad.figures = "not figures"  # type: ignore[assignment]  # booking it raises
    answered(policy, "req_a").finish(services, 200)
    services.books.add(bad, services)
    answered(policy, "req_b").finish(services, 200)
    services.books.drain()
    assert [r.request_id for r in services.usage.rows] == ["req_a", "req_b"]
    assert "usage record req_bad dropped" in caplog.text


async def test_shutdown_books_what_waits(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    usage = tmp_path / "usage.jsonl"
    settings = Settings(policies=str(tmp_path / "policies"), usage_log=str(usage))
    async with open_services(settings) as services:
        policy = services.policies.current.default
        answered(policy, "req_last").finish(services, 200)
        assert services.books.pending == 1
    rows = [orjson.loads(line) for line in usage.read_bytes().splitlines()]
    assert [r["request_id"] for r in rows] == ["req_last"]


def test_a_scrape_right_after_a_request_counts_it(proxy: RunningProxy) -> None:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=proxy.url, timeout=10) as client:
        for _ in range(3):
            assert client.post("/v1/chat/completions", json=body).status_code == 200
        text = client.get("/metrics").text
    line = next(
        ln
        for ln in text.splitlines()
        if ln.startswith("context_proxy_requests_total{") and 'status="200"' in ln
    )
    assert line.endswith(" 3.0")


def test_rows_left_by_a_loop_that_stopped_are_booked_by_the_next_one(tmp_path: Path) -> None:
    services, policy = services_for(tmp_path)

    async def one(request_id: str) -> None:
        answered(policy, request_id).finish(services, 200)

    asyncio.run(one("req_first"))  # its loop is gone before the drain was due
    assert services.usage.rows == []
    books_due = services.books._due
    services.books._due = books_due - books.DRAIN_S - books.STALE_S - 1  # as if long ago
    asyncio.run(one("req_second"))
    assert [r.request_id for r in services.usage.rows] == ["req_first", "req_second"]
