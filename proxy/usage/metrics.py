"""Metrics: Prometheus counters, histograms and gauges, in a registry owned by the app."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from proxy.usage.export import UsageLogCollector, UsageLogHealth, WithoutCreated
from proxy.usage.labels import LATENCY_BUCKETS, MAX_MODELS_PER_TEAM, route_group
from proxy.usage.request_metrics import RequestStats

if TYPE_CHECKING:
    from proxy.usage.record import UsageRecord

__all__ = ["Metrics", "route_group"]


class Metrics:
    """Every metric the proxy exports; one instance per app, so tests never share state."""

    def __init__(self, max_models_per_team: int = MAX_MODELS_PER_TEAM) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        p = "context_proxy_"
        # Per (team, model) request figures: plain numbers, exported at scrape time.
        self.request_stats = RequestStats(max_models_per_team)
        r.register(self.request_stats)
        self.threshold_events = Counter(
            p + "threshold_events",
            "Crossings into warning or critical.",
            ("team", "level", "source"),
            registry=r,
        )
        self.quota_used = Gauge(
            p + "quota_used_tokens",
            "Tokens used in the binding quota period.",
            ("team",),
            registry=r,
        )
        self.count_factor = Gauge(
            p + "token_estimate_factor",
            "The factor an estimated model's counts are multiplied by, calibrated from the "
            "prompt tokens its upstream reports.",
            ("model",),
            registry=r,
        )
        self.quota_limit = Gauge(
            p + "quota_limit_tokens", "The binding quota's limit.", ("team",), registry=r
        )
        # Present only when a shared state is configured (the label is its backend).
        self.shared_state_up = Gauge(
            p + "shared_state_up",
            "1 while the shared state answers; 0 while quotas are counted locally.",
            ("backend",),
            registry=r,
        )
        self.shared_state_failures = Counter(
            p + "shared_state_failures",
            "Failed shared-state operations, by operation (sync, summary, lock).",
            ("backend", "op"),
            registry=r,
        )
        self.shared_state_unsent = Gauge(
            p + "shared_state_unsent_tokens",
            "Quota tokens counted by this process and not yet in the shared state.",
            ("backend",),
            registry=r,
        )
        self.shared_quota = Gauge(
            p + "shared_quota_tokens",
            "Tokens the whole fleet used, as last read from the shared state.",
            ("team", "period"),
            registry=r,
        )
        self.plan_failures = Counter(
            p + "plan_failures",
            "Requests forwarded as they came because planning them failed (a bug: see the log).",
            ("team",),
            registry=r,
        )
        self.rate_limited_requests = Counter(
            p + "rate_limited",
            "Requests refused for a rate limit, by the kind of limit (requests, tokens).",
            ("team", "limit"),
            registry=r,
        )
        self.recall_declared = Counter(
            p + "recall_declared",
            "Trimmed requests the proxy declared its context_recall tool in.",
            ("team",),
            registry=r,
        )
        self.recall_rounds = Counter(
            p + "recall_rounds",
            "Rounds the proxy continued an answer after serving context_recall itself.",
            ("team",),
            registry=r,
        )
        self.passthrough = Counter(
            p + "passthrough_requests",
            "Other /v1 requests forwarded unchanged.",
            ("route", "status"),
            registry=r,
        )
        self.passthrough_latency = Histogram(
            p + "passthrough_duration_seconds",
            "Time per pass-through request.",
            ("route",),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

    def model_label(self, team: str, model: str) -> str:
        """`model`, or "other" once the team has shown `max_models_per_team` distinct ones."""
        return self.request_stats.model_label(team, model)

    def observe_request(
        self,
        team: str,
        model: str,
        *,
        status: int,
        stream: bool,
        prompt_tokens: int,
        completion_tokens: int,
        tokens_removed: int,
        trimmed: bool,
        utilization: float | None,
        latency_s: float,
        upstream_s: float | None,
        overhead_s: float | None = None,
        cached_tokens: int | None = None,
        cost_usd: float | None = None,
        saved_usd: float | None = None,
    ) -> None:
        """One finished chat-completion request (also failed or rejected ones)."""
        self.request_stats.observe(
            team, model, status, stream, prompt_tokens, completion_tokens, tokens_removed,
            trimmed, utilization, latency_s, upstream_s, overhead_s, cached_tokens, cost_usd,
            saved_usd,
        )  # fmt: skip

    def observe_record(self, record: UsageRecord, model: str | None = None) -> None:
        """`observe_request` with every figure taken from a finished usage record; `model`:
        the label to use instead of the record's (see Exchange._model_label)."""
        removed = record.tokens_before - record.tokens_after
        trimmed = removed > 0 or bool(
            record.dropped or record.truncated or record.summarized or record.deduped
        )
        upstream_ms = record.upstream_ms
        self.request_stats.observe(
            record.team, record.model if model is None else model, record.status, record.stream,
            record.prompt_tokens, record.completion_tokens, removed, trimmed, record.utilization,
            record.latency_ms / 1000, None if upstream_ms is None else upstream_ms / 1000, None,
            record.cached_tokens, record.cost_usd, record.saved_usd,
        )  # fmt: skip

    def threshold_event(self, team: str, level: str, source: str = "context") -> None:
        """A team crossed into `level` ("warning"/"critical") of its context or its quota."""
        self.threshold_events.labels(team, str(getattr(level, "value", level)), source).inc()

    def rate_limited(self, team: str, limit: str) -> None:
        self.rate_limited_requests.labels(team, limit).inc()

    def set_quota(self, team: str, used: int, limit: int | None) -> None:
        """The team's binding quota; without a limit only `used` is exported."""
        self.quota_used.labels(team).set(used)
        if limit is None:
            with contextlib.suppress(KeyError):  # never set, or already removed
                self.quota_limit.remove(team)
        else:
            self.quota_limit.labels(team).set(limit)

    def set_shared_state(self, backend: str, up: bool, unsent: int | None = None) -> None:
        """Whether the shared state answers, and how many quota tokens wait to be sent."""
        self.shared_state_up.labels(backend).set(1 if up else 0)
        if unsent is not None:
            self.shared_state_unsent.labels(backend).set(unsent)

    def set_shared_quota(self, team: str, day: int, month: int) -> None:
        """The fleet-wide totals of `team` for the current day and month."""
        self.shared_quota.labels(team, "day").set(day)
        self.shared_quota.labels(team, "month").set(month)

    def shared_state_failed(self, backend: str, op: str) -> None:
        """One failed shared-state operation ("sync", "summary", "lock")."""
        self.shared_state_failures.labels(backend, op).inc()

    def observe_passthrough(self, route: str, status: int, latency_s: float) -> None:
        """A request to another /v1 route; pass `route_group(path)` as `route`."""
        self.passthrough.labels(route, str(status)).inc()
        self.passthrough_latency.labels(route).observe(latency_s)

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition: (body, content type)."""
        return generate_latest(WithoutCreated(self.registry)), CONTENT_TYPE_LATEST

    def watch_usage_log(self, usage: UsageLogHealth) -> None:
        """Export the usage writer's failures (read at each scrape)."""
        self.registry.register(UsageLogCollector(usage))
