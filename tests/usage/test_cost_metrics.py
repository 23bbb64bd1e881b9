"""Prometheus: cached prompt tokens, cost and savings per (team, model); request figures kept
as plain numbers (no prometheus_client child call per request)."""

from __future__ import annotations

from typing import Any

import httpx
import prometheus_client.metrics as prom
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.usage.ledger import UsageRecord
from proxy.usage.metrics import Metrics
from tests.usage.caching_upstream import CachingUpstream, caching_upstream, rows_of

__all__ = ["caching_upstream"]  # the fixture


def samples(m: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, _ = m.render()
    assert b"_created" not in body
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def row(**kw: Any) -> UsageRecord:
    base: dict[str, Any] = {"team": "t", "model": "gpt-4o", "status": 200, "latency_ms": 5.0}
    return UsageRecord(**(base | kw))


def test_cached_tokens_cost_and_savings_are_counted() -> None:
    m = Metrics()
    m.observe_record(row(prompt_tokens=2000, cached_tokens=1024, cost_usd=0.004, saved_usd=0.01))
    m.observe_record(row(prompt_tokens=2000, cached_tokens=1152, cost_usd=0.003, saved_usd=0.0))
    m.observe_record(row(prompt_tokens=10, cached_tokens=None, cost_usd=None, saved_usd=None))
    s = samples(m)
    labels = (("model", "gpt-4o"), ("team", "t"))
    assert s[("context_proxy_cached_prompt_tokens_total", labels)] == 2176
    assert s[("context_proxy_cost_usd_total", labels)] == pytest.approx(0.007)
    assert s[("context_proxy_saved_usd_total", labels)] == pytest.approx(0.01)
    assert s[("context_proxy_prompt_tokens_total", labels)] == 4010


def test_no_cache_or_cost_series_before_there_is_a_figure() -> None:
    m = Metrics()
    m.observe_record(row(model="house-model", prompt_tokens=10))
    names = {name for name, _ in samples(m)}
    assert "context_proxy_prompt_tokens_total" in names
    assert not names & {
        "context_proxy_cached_prompt_tokens_total",
        "context_proxy_cost_usd_total",
        "context_proxy_saved_usd_total",
        "context_proxy_upstream_duration_seconds_count",
    }


def test_cost_series_share_the_model_label_cap() -> None:
    m = Metrics(max_models_per_team=2)
    for i in range(5):
        m.observe_record(row(model=f"m{i}", cost_usd=1.0, cached_tokens=1))
    models = {
        dict(labels)["model"]
        for name, labels in samples(m)
        if name == "context_proxy_cost_usd_total"
    }
    assert models == {"m0", "m1", "other"}
    assert samples(m)[("context_proxy_cost_usd_total", (("model", "other"), ("team", "t")))] == 3


def test_a_finished_request_makes_no_prometheus_client_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each Counter.inc / Histogram.observe takes a lock: ~12 per request were ~10 µs of
    every request's CPU; the figures are plain numbers now, turned into series when scraped."""
    calls = {"n": 0}

    def counting(method: Any) -> Any:
        def wrapped(self: Any, *a: Any, **k: Any) -> Any:
            calls["n"] += 1
            return method(self, *a, **k)

        return wrapped

    monkeypatch.setattr(prom.MetricWrapperBase, "labels", counting(prom.MetricWrapperBase.labels))
    monkeypatch.setattr(prom.Counter, "inc", counting(prom.Counter.inc))
    monkeypatch.setattr(prom.Histogram, "observe", counting(prom.Histogram.observe))
    m = Metrics()
    for _ in range(50):
        m.observe_record(
            row(prompt_tokens=9, completion_tokens=3, tokens_before=20, tokens_after=9,
                utilization=0.5, upstream_ms=3.0, cached_tokens=4, cost_usd=1e-6, saved_usd=1e-6)
        )  # fmt: skip
    assert calls["n"] == 0
    assert samples(m)[("context_proxy_requests_total",
                       (("model", "gpt-4o"), ("status", "200"), ("stream", "false"), ("team", "t")))] == 50  # fmt: skip


def test_histogram_buckets_are_cumulative_like_prometheus_client() -> None:
    m = Metrics()
    for latency_ms in (0.5, 1.0, 3.0, 70_000.0):  # 0.0005 s, on a bound, between, beyond all
        m.observe_record(row(latency_ms=latency_ms))
    s = samples(m)

    def bucket(le: str) -> float:
        key = (("le", le), ("model", "gpt-4o"), ("team", "t"))
        return s[("context_proxy_request_duration_seconds_bucket", key)]

    assert (bucket("0.001"), bucket("0.0025"), bucket("0.005"), bucket("60.0")) == (2, 2, 3, 3)
    assert bucket("+Inf") == 4
    labels = (("model", "gpt-4o"), ("team", "t"))
    assert s[("context_proxy_request_duration_seconds_count", labels)] == 4
    assert s[("context_proxy_request_duration_seconds_sum", labels)] == pytest.approx(70.0045)


def test_metrics_endpoint_counts_what_the_upstream_reported(
    start_proxy: Any, caching_upstream: tuple[CachingUpstream, str]
) -> None:
    proxy = start_proxy(upstream=caching_upstream[1])
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    for cached, stream in (("1024", False), ("256", True), ("none", False)):
        r = httpx.post(
            proxy.url + "/v1/chat/completions",
            json=body | {"stream": stream},
            headers={"x-cached": cached},
        )
        assert r.status_code == 200
    rows = rows_of(proxy, 3)
    text = httpx.get(proxy.url + "/metrics").text
    s = {
        (x.name, tuple(sorted(x.labels.items()))): x.value
        for f in text_string_to_metric_families(text)
        for x in f.samples
    }
    labels = (("model", "gpt-4o"), ("team", "default"))
    assert s[("context_proxy_cached_prompt_tokens_total", labels)] == 1280
    assert s[("context_proxy_cost_usd_total", labels)] == pytest.approx(
        sum(r["cost_usd"] for r in rows)
    )
