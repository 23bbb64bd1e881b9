"""Metrics: Prometheus counters, histograms and gauges, in a registry owned by the app."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from proxy.usage.export import UsageLogCollector, UsageLogHealth, WithoutCreated
from proxy.usage.labels import (
    LATENCY_BUCKETS,
    MAX_LABEL_CHARS,
    MAX_MODELS_PER_TEAM,
    OTHER,
    OVERHEAD_BUCKETS,
    UTILIZATION_BUCKETS,
    route_group,
)

if TYPE_CHECKING:
    from proxy.usage.ledger import UsageRecord

__all__ = ["Metrics", "route_group"]

# Positions in `Metrics._per_model`.
_PROMPT, _COMPLETION, _REMOVED, _TRIMMED, _UTILIZATION, _LATENCY, _UPSTREAM, _OVERHEAD = range(8)


class _Children:
    """One (team, model)'s labelled metrics, each made on first use (an unused one must
    not show up as an empty series)."""

    __slots__ = ("_labels", "_made", "_metrics")

    def __init__(self, metrics: tuple[Any, ...], labels: tuple[str, str]) -> None:
        self._metrics = metrics
        self._labels = labels
        self._made: list[Any] = [None] * len(metrics)

    def get(self, index: int) -> Any:
        child = self._made[index]
        if child is None:
            child = self._made[index] = self._metrics[index].labels(*self._labels)
        return child


class Metrics:
    """Every metric the proxy exports; one instance per app, so tests never share state."""

    def __init__(self, max_models_per_team: int = MAX_MODELS_PER_TEAM) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._max_models = max_models_per_team
        self._models: dict[str, set[str]] = {}
        r, tm = self.registry, ("team", "model")
        p = "context_proxy_"
        self.requests = Counter(
            p + "requests",
            "Chat-completion requests by final status.",
            ("team", "model", "status", "stream"),
            registry=r,
        )
        self.prompt_tokens = Counter(p + "prompt_tokens", "Prompt tokens.", tm, registry=r)
        self.completion_tokens = Counter(
            p + "completion_tokens", "Completion tokens.", tm, registry=r
        )
        self.tokens_removed = Counter(
            p + "tokens_removed", "Prompt tokens removed by trimming.", tm, registry=r
        )
        self.trimmed = Counter(
            p + "trimmed_requests", "Requests that were trimmed.", tm, registry=r
        )
        self.threshold_events = Counter(
            p + "threshold_events",
            "Crossings into warning or critical.",
            ("team", "level", "source"),
            registry=r,
        )
        self.utilization = Histogram(
            p + "utilization_ratio",
            "tokens_before / budget.",
            tm,
            buckets=UTILIZATION_BUCKETS,
            registry=r,
        )
        self.latency = Histogram(
            p + "request_duration_seconds",
            "Total time per request.",
            tm,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_latency = Histogram(
            p + "upstream_duration_seconds",
            "Time spent waiting on the upstream.",
            tm,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.overhead = Histogram(
            p + "overhead_seconds",
            "Proxy time: total minus upstream.",
            tm,
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.quota_used = Gauge(
            p + "quota_used_tokens",
            "Tokens used in the binding quota period.",
            ("team",),
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

        self._per_model = (
            self.prompt_tokens,
            self.completion_tokens,
            self.tokens_removed,
            self.trimmed,
            self.utilization,
            self.latency,
            self.upstream_latency,
            self.overhead,
        )
        self._children: dict[tuple[str, str], _Children] = {}
        self._request_children: dict[tuple[str, str, int, bool], Any] = {}

    def model_label(self, team: str, model: str) -> str:
        """`model`, or "other" once the team has shown `max_models_per_team` distinct ones."""
        seen = self._models.setdefault(team, set())
        if model in seen:
            return model
        if len(seen) >= self._max_models or len(model) > MAX_LABEL_CHARS:
            return OTHER
        seen.add(model)
        return model

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
    ) -> None:
        """One finished chat-completion request (also failed or rejected ones)."""
        m = self.model_label(team, model)
        # `.labels()` hashes and locks on every call; the children are looked up once per
        # (team, model) instead: bounded, since models per team are capped.
        c = self._children.get((team, m))
        if c is None:
            c = self._children[(team, m)] = _Children(self._per_model, (team, m))
        key = (team, m, status, stream)
        counter = self._request_children.get(key)
        if counter is None:
            counter = self._request_children[key] = self.requests.labels(
                team, m, str(status), "true" if stream else "false"
            )
        counter.inc()
        if prompt_tokens > 0:
            c.get(_PROMPT).inc(prompt_tokens)
        if completion_tokens > 0:
            c.get(_COMPLETION).inc(completion_tokens)
        if tokens_removed > 0:
            c.get(_REMOVED).inc(tokens_removed)
        if trimmed:
            c.get(_TRIMMED).inc()
        if utilization is not None:
            c.get(_UTILIZATION).observe(utilization)
        c.get(_LATENCY).observe(latency_s)
        if upstream_s is not None:
            c.get(_UPSTREAM).observe(upstream_s)
            if overhead_s is None:
                overhead_s = max(0.0, latency_s - upstream_s)
        if overhead_s is not None:
            c.get(_OVERHEAD).observe(overhead_s)

    def observe_record(self, record: UsageRecord, model: str | None = None) -> None:
        """`observe_request` with every figure taken from a finished usage record; `model`:
        the label to use instead of the record's (see Exchange._model_label)."""
        removed = max(0, record.tokens_before - record.tokens_after)
        trimmed = removed > 0 or any(
            (record.dropped, record.truncated, record.summarized, record.deduped)
        )
        upstream_s = None if record.upstream_ms is None else record.upstream_ms / 1000
        self.observe_request(
            record.team,
            record.model if model is None else model,
            status=record.status,
            stream=record.stream,
            prompt_tokens=record.prompt_tokens,
            completion_tokens=record.completion_tokens,
            tokens_removed=removed,
            trimmed=trimmed,
            utilization=record.utilization,
            latency_s=record.latency_ms / 1000,
            upstream_s=upstream_s,
        )

    def threshold_event(self, team: str, level: str, source: str = "context") -> None:
        """A team crossed into `level` ("warning"/"critical") of its context or its quota."""
        self.threshold_events.labels(team, str(getattr(level, "value", level)), source).inc()

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
