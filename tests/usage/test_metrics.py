"""Prometheus metrics: names, labels, buckets, the model-label cap, per-app registries."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from proxy.types import Level
from proxy.usage.ledger import UsageRecord
from proxy.usage.metrics import Metrics, route_group


def samples(m: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, content_type = m.render()
    assert content_type.startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(m: Metrics, name: str, **labels: str) -> float | None:
    return samples(m).get((name, tuple(sorted(labels.items()))))


def observe(m: Metrics, model: str = "gpt-4o", **kw: object) -> None:
    args: dict[str, object] = {
        "status": 200,
        "stream": False,
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "tokens_removed": 0,
        "trimmed": False,
        "utilization": 0.5,
        "latency_s": 0.2,
        "upstream_s": 0.15,
    }
    args.update(kw)
    m.observe_request("research", model, **args)  # type: ignore[arg-type]


def test_requests_tokens_and_trimming_are_counted() -> None:
    m = Metrics()
    observe(m)
    observe(m, status=502, stream=True, prompt_tokens=0, completion_tokens=0)
    observe(m, tokens_removed=300, trimmed=True, utilization=1.2)
    team = {"team": "research", "model": "gpt-4o"}
    assert value(m, "context_proxy_requests_total", status="200", stream="false", **team) == 2
    assert value(m, "context_proxy_requests_total", status="502", stream="true", **team) == 1
    assert value(m, "context_proxy_prompt_tokens_total", **team) == 200
    assert value(m, "context_proxy_completion_tokens_total", **team) == 40
    assert value(m, "context_proxy_tokens_removed_total", **team) == 300
    assert value(m, "context_proxy_trimmed_requests_total", **team) == 1


def test_histograms_have_the_documented_buckets() -> None:
    m = Metrics()
    observe(m, latency_s=0.0005, upstream_s=0.0002, utilization=0.85)
    team = {"team": "research", "model": "gpt-4o"}
    lat = "context_proxy_request_duration_seconds_bucket"
    assert value(m, lat, le="0.001", **team) == 1
    assert value(m, lat, le="60.0", **team) == 1
    util = "context_proxy_utilization_ratio_bucket"
    assert value(m, util, le="0.8", **team) == 0
    assert value(m, util, le="0.9", **team) == 1
    assert value(m, util, le="1.5", **team) == 1
    # Overhead is total minus upstream when not given.
    assert value(m, "context_proxy_overhead_seconds_sum", **team) == 0.0005 - 0.0002
    assert value(m, "context_proxy_upstream_duration_seconds_count", **team) == 1


def test_a_request_without_upstream_time_has_no_upstream_sample() -> None:
    m = Metrics()
    observe(m, status=429, upstream_s=None, utilization=None)
    team = {"team": "research", "model": "gpt-4o"}
    assert value(m, "context_proxy_upstream_duration_seconds_count", **team) is None
    assert value(m, "context_proxy_utilization_ratio_count", **team) is None
    assert value(m, "context_proxy_request_duration_seconds_count", **team) == 1


def test_each_app_has_its_own_registry() -> None:
    a, b = Metrics(), Metrics()
    observe(a)
    assert value(a, "context_proxy_prompt_tokens_total", team="research", model="gpt-4o") == 100
    assert value(b, "context_proxy_prompt_tokens_total", team="research", model="gpt-4o") is None


def test_models_per_team_are_capped() -> None:
    m = Metrics(max_models_per_team=3)
    for i in range(6):
        observe(m, model=f"model-{i}")
    observe(m, model="model-1")  # a model seen before the cap keeps its label
    models = {
        dict(labels)["model"]
        for (name, labels) in samples(m)
        if name == "context_proxy_prompt_tokens_total"
    }
    assert models == {"model-0", "model-1", "model-2", "other"}
    assert value(m, "context_proxy_prompt_tokens_total", team="research", model="other") == 300
    assert m.model_label("another-team", "model-5") == "model-5"


def test_observe_record_takes_figures_from_the_usage_row() -> None:
    m = Metrics()
    rec = UsageRecord(
        team="t", model="m", status=200, tokens_before=1000, tokens_after=700, dropped=2,
        prompt_tokens=700, completion_tokens=50, utilization=1.1, latency_ms=250.0,
        upstream_ms=200.0,
    )  # fmt: skip
    m.observe_record(rec)
    labels = {"team": "t", "model": "m"}
    assert value(m, "context_proxy_tokens_removed_total", **labels) == 300
    assert value(m, "context_proxy_trimmed_requests_total", **labels) == 1
    assert value(m, "context_proxy_request_duration_seconds_sum", **labels) == 0.25
    assert abs(value(m, "context_proxy_overhead_seconds_sum", **labels) - 0.05) < 1e-9  # type: ignore[operator]


def test_threshold_events_and_quota_gauges() -> None:
    m = Metrics()
    m.threshold_event("t", "warning")
    m.threshold_event("t", Level.CRITICAL, "quota")  # type: ignore[arg-type]
    assert (
        value(
            m, "context_proxy_threshold_events_total", team="t", level="warning", source="context"
        )
        == 1
    )
    assert (
        value(m, "context_proxy_threshold_events_total", team="t", level="critical", source="quota")
        == 1
    )
    m.set_quota("t", 500, 1000)
    assert value(m, "context_proxy_quota_used_tokens", team="t") == 500
    assert value(m, "context_proxy_quota_limit_tokens", team="t") == 1000
    m.set_quota("t", 600, None)  # the limit was removed from the policy
    assert value(m, "context_proxy_quota_used_tokens", team="t") == 600
    assert value(m, "context_proxy_quota_limit_tokens", team="t") is None
    m.set_quota("u", 1, None)  # never had a limit: no error


def test_passthrough_routes_are_grouped() -> None:
    assert route_group("/v1/models") == "models"
    assert route_group("/v1/models/gpt-4o") == "models"
    assert route_group("/v1/embeddings") == "embeddings"
    assert route_group("/v1/some/made-up/path") == "other"
    assert route_group("/v1") == "other"
    m = Metrics()
    m.observe_passthrough(route_group("/v1/models"), 200, 0.01)
    m.observe_passthrough(route_group("/v1/x-y-z"), 404, 0.01)
    assert value(m, "context_proxy_passthrough_requests_total", route="models", status="200") == 1
    assert value(m, "context_proxy_passthrough_requests_total", route="other", status="404") == 1
    assert value(m, "context_proxy_passthrough_duration_seconds_count", route="models") == 1
