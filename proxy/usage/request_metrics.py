"""Metrics (requests): per (team, model) request figures as plain numbers, exported when scraped.

A prometheus_client Counter or Histogram child takes a lock and a call per update: the ~12
updates of a finished request cost ~10 µs of every request's CPU. Here a request adds to a
few slots of one row (all on the event loop's thread), and the families are built at scrape
time, which is rare next to requests. Series names, labels and buckets are those the
Counter/Histogram metrics had; a series appears only once it has a value (none empty).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from proxy.usage.labels import (
    LATENCY_BUCKETS,
    MAX_LABEL_CHARS,
    OTHER,
    OVERHEAD_BUCKETS,
    UTILIZATION_BUCKETS,
)

P = "context_proxy_"
# Counters per (team, model), by their slot in _Row: (name, help).
COUNTERS = (
    ("prompt", P + "prompt_tokens", "Prompt tokens."),
    ("completion", P + "completion_tokens", "Completion tokens."),
    ("removed", P + "tokens_removed", "Prompt tokens removed by trimming."),
    ("trimmed", P + "trimmed_requests", "Requests that were trimmed."),
    ("cached", P + "cached_prompt_tokens", "Prompt tokens the upstream served from its cache."),
    ("cost", P + "cost_usd", "Estimated USD as billed, at litellm's bundled prices."),
    ("saved", P + "saved_usd", "Estimated USD trimming saved, as billed."),
    ("lost", P + "trim_extra_cost_usd", "Estimated USD trimming cost beyond what it removed."),
)
# Histograms per (team, model): (slot, name, help, buckets).
HISTOGRAMS = (
    ("utilization", P + "utilization_ratio", "tokens_before / budget.", UTILIZATION_BUCKETS),
    ("latency", P + "request_duration_seconds", "Total time per request.", LATENCY_BUCKETS),
    ("upstream", P + "upstream_duration_seconds", "Time spent waiting on the upstream.",
     LATENCY_BUCKETS),
    ("overhead", P + "overhead_seconds", "Proxy time: total minus upstream.", OVERHEAD_BUCKETS),
)  # fmt: skip


class _Histogram:
    """Non-cumulative bucket counts (the last one is +Inf) and the sum of observations."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def add(self, amount: float) -> None:
        # Like prometheus_client: the first bucket whose bound is >= the amount.
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.total += amount


class _Row:
    """One (team, model)'s figures; each None until first counted (no empty series)."""

    __slots__ = (
        "cached", "completion", "cost", "latency", "lost", "overhead", "prompt", "removed",
        "saved", "trimmed", "upstream", "utilization",
    )  # fmt: skip

    def __init__(self) -> None:
        self.prompt: int | None = None
        self.completion: int | None = None
        self.removed: int | None = None
        self.trimmed: int | None = None
        self.cached: int | None = None
        self.cost: float | None = None
        self.saved: float | None = None
        self.lost: float | None = None  # negative savings, as a counter of their own
        self.utilization: _Histogram | None = None
        self.latency: _Histogram | None = None
        self.upstream: _Histogram | None = None
        self.overhead: _Histogram | None = None


class RequestStats(Collector):
    """Requests by status and stream, tokens, cache, cost and timings per (team, model)."""

    def __init__(self, max_models_per_team: int) -> None:
        self._max_models = max_models_per_team
        self._models: dict[str, set[str]] = {}
        self._rows: dict[tuple[str, str], _Row] = {}
        self._requests: dict[tuple[str, str, int, bool], int] = {}

    def model_label(self, team: str, model: str) -> str:
        """`model`, or "other" once the team has shown `max_models_per_team` distinct ones."""
        seen = self._models.setdefault(team, set())
        if model in seen:
            return model
        if len(seen) >= self._max_models or len(model) > MAX_LABEL_CHARS:
            return OTHER
        seen.add(model)
        return model

    def observe(  # positional on purpose: this runs once per request
        self,
        team: str,
        model: str,
        status: int,
        stream: bool,
        prompt: int,
        completion: int,
        removed: int,
        trimmed: bool,
        utilization: float | None,
        latency_s: float,
        upstream_s: float | None,
        overhead_s: float | None,
        cached: int | None,
        cost: float | None,
        saved: float | None,
    ) -> None:
        """One finished request (also failed or rejected ones)."""
        m = self.model_label(team, model)
        key = (team, m, status, stream)
        self._requests[key] = self._requests.get(key, 0) + 1
        row = self._rows.get((team, m))
        if row is None:
            row = self._rows[(team, m)] = _Row()
        if prompt > 0:
            row.prompt = (row.prompt or 0) + prompt
        if completion > 0:
            row.completion = (row.completion or 0) + completion
        if removed > 0:
            row.removed = (row.removed or 0) + removed
        if trimmed:
            row.trimmed = (row.trimmed or 0) + 1
        if cached:
            row.cached = (row.cached or 0) + cached
        if cost:
            row.cost = (row.cost or 0.0) + cost
        if saved and saved > 0:
            row.saved = (row.saved or 0.0) + saved
        elif saved:  # a counter never falls: what trimming cost goes in one of its own
            row.lost = (row.lost or 0.0) - saved
        if utilization is not None:
            h = row.utilization or _new(row, "utilization", UTILIZATION_BUCKETS)
            h.add(utilization)
        (row.latency or _new(row, "latency", LATENCY_BUCKETS)).add(latency_s)
        if upstream_s is not None:
            (row.upstream or _new(row, "upstream", LATENCY_BUCKETS)).add(upstream_s)
            if overhead_s is None:
                overhead_s = max(0.0, latency_s - upstream_s)
        if overhead_s is not None:
            (row.overhead or _new(row, "overhead", OVERHEAD_BUCKETS)).add(overhead_s)

    def describe(self) -> Iterator[Metric]:
        return self.collect()

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            P + "requests",
            "Chat-completion requests by final status.",
            labels=("team", "model", "status", "stream"),
        )
        # Copies: a scrape runs while requests keep adding rows.
        for (team, model, status, stream), count in list(self._requests.items()):
            requests.add_metric((team, model, str(status), "true" if stream else "false"), count)
        yield requests
        rows = list(self._rows.items())
        for slot, name, doc in COUNTERS:
            family = CounterMetricFamily(name, doc, labels=("team", "model"))
            for labels, row in rows:
                value = getattr(row, slot)
                if value is not None:
                    family.add_metric(labels, value)
            yield family
        for slot, name, doc, buckets in HISTOGRAMS:
            hist_family = HistogramMetricFamily(name, doc, labels=("team", "model"))
            bounds = [*map(floatToGoString, buckets), "+Inf"]
            for labels, row in rows:
                hist: _Histogram | None = getattr(row, slot)
                if hist is not None:
                    acc, cumulative = 0, []
                    for bound, count in zip(bounds, list(hist.counts), strict=True):
                        acc += count
                        cumulative.append((bound, float(acc)))
                    hist_family.add_metric(labels, cumulative, hist.total)
            yield hist_family


def _new(row: _Row, slot: str, bounds: tuple[float, ...]) -> _Histogram:
    hist = _Histogram(bounds)
    setattr(row, slot, hist)
    return hist
