"""Exchange.book builds the usage row positionally (cheaper): every field checked by name."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.policy import PolicyStore
from proxy.server.core.books import Books
from proxy.server.pipeline.exchange import Exchange
from proxy.tokens import ContextWindows
from proxy.types import Level
from proxy.usage import Metrics, QuotaBook, ThresholdWatch, UsageRecord


class Sink:
    def __init__(self) -> None:
        self.rows: list[UsageRecord] = []

    def write(self, record: UsageRecord) -> None:
        self.rows.append(record)


@pytest.fixture
def services(tmp_path: Path) -> Any:
    return SimpleNamespace(
        quotas=QuotaBook(), spend=QuotaBook(), thresholds=ThresholdWatch(), metrics=Metrics(),
        windows=ContextWindows(), usage=Sink(), books=Books(), shared=None, shared_spend=None,
    )  # fmt: skip


def test_every_field_of_the_row_is_the_one_named(tmp_path: Path, services: Any) -> None:
    (tmp_path / "research.yaml").write_text(
        "team: research\nquotas: {daily_tokens: 100000}\nthresholds: {warning: 0.5, critical: 0.99}\n"
    )
    policy = PolicyStore.load(str(tmp_path)).current.by_team("research")
    # Distinct values everywhere, so two fields swapped cannot pass.
    outcome = SimpleNamespace(
        budget=9000, context_window=12000, tokens_before=6400, tokens_after=5100,
        dropped=11, truncated=12, summarized=13, deduped=14, trimmed=50,
    )  # fmt: skip
    ex = Exchange("req_abc", policy=policy, model="gpt-4o", outcome=outcome, stream=True)  # type: ignore[arg-type]
    ex.api = "responses"
    ex.upstream_started, ex.upstream_ended = ex.started + 0.001, ex.started + 0.003
    ex.take_usage(
        {"input_tokens": 5123, "output_tokens": 77, "input_tokens_details": {"cached_tokens": 4096}}
    )
    ex.finish(services, 201, "odd_error")  # off a loop: booked at once
    [row] = services.usage.rows
    assert ex.outcome is None  # let go: the row needs only its figures
    cost = (5123 - 4096) * 2.5e-06 + 4096 * 1.25e-06 + 77 * 1e-05
    # Saved as billed: the 1,300 tokens removed at the reported read share (4096 of 5123).
    saved = 1300 * (4096 / 5123 * 1.25e-06 + (1 - 4096 / 5123) * 2.5e-06)
    expected = {
        "request_id": "req_abc", "team": "research", "model": "gpt-4o", "status": 201,
        "stream": True, "context_window": 12000, "budget": 9000, "tokens_before": 6400,
        "tokens_after": 5100, "dropped": 11, "truncated": 12, "summarized": 13, "deduped": 14,
        "prompt_tokens": 5123, "completion_tokens": 77, "total_tokens": 5200,
        "usage_source": "upstream", "utilization": round(6400 / 9000, 4), "level": Level.WARNING,
        "quota_used": 5200, "quota_limit": 100000, "quota_level": Level.NORMAL, "quota_period": "day",
        "error": "odd_error", "kind": "responses", "policy": policy.name, "cached_tokens": 4096,
        "api": "responses", "saved_usd": pytest.approx(saved),
        "cost_usd": pytest.approx(cost), "spend_usd": None, "spend_limit_usd": None,
        "spend_level": Level.NORMAL, "spend_period": None, "recall_rounds": 0,
        "recalled_tokens": 0,
    }  # fmt: skip
    names = [f.name for f in fields(UsageRecord)]
    assert set(names) == {*expected, "ts", "latency_ms", "upstream_ms"}
    for name, value in expected.items():
        assert getattr(row, name) == value, name
    assert row.ts.endswith("Z") and row.ts[:2] == "20"
    assert row.upstream_ms == pytest.approx(2.0, abs=0.01)
    assert isinstance(row.latency_ms, float) and row.latency_ms >= 0


def test_a_request_refused_before_planning_has_an_empty_row(services: Any) -> None:
    Exchange("req_1").finish(services, 401, "invalid_api_key")
    [row] = services.usage.rows
    assert (row.team, row.policy, row.model, row.status) == ("unknown", "none", "", 401)
    assert row.context_window is None and row.budget is None and row.tokens_before == 0
    assert row.quota_limit is None and row.quota_level is Level.NORMAL
    assert row.cost_usd is None and row.cached_tokens is None and row.upstream_ms is None


def test_a_row_says_where_the_team_stands_against_its_dollar_quota(
    tmp_path: Path, services: Any
) -> None:
    """The row is written after its cost is charged: spend_usd includes this request."""
    (tmp_path / "ops.yaml").write_text(
        "team: ops\nquotas: {daily_usd: 0.05, monthly_usd: 10}\n"
        "thresholds: {warning: 0.5, critical: 0.9}\n"
    )
    policy = PolicyStore.load(str(tmp_path)).current.by_team("ops")
    costs = []
    for i in range(2):
        ex = Exchange(f"req_{i}", policy=policy, model="gpt-4o")
        ex.take_usage({"prompt_tokens": 5000, "completion_tokens": 1000})
        ex.finish(services, 200)
        costs.append(services.usage.rows[-1].cost_usd)
    first, second = services.usage.rows
    assert costs[0] == pytest.approx(5000 * 2.5e-06 + 1000 * 1e-05)
    assert first.spend_usd == pytest.approx(costs[0], abs=1e-6)
    assert second.spend_usd == pytest.approx(costs[0] + costs[1], abs=1e-6)
    assert (first.spend_period, first.spend_limit_usd) == ("day", 0.05)  # nearer its limit
    assert first.spend_level is Level.NORMAL and second.spend_level is Level.CRITICAL
