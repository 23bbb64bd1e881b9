"""Metrics export step: the registry as scraped (no `_created` series), and the usage
log's health read at scrape time."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class UsageLogHealth(Protocol):
    """What the usage writer tells about itself (proxy.usage.ledger.UsageLog)."""

    write_failures: int
    dropped: int

    @property
    def failing(self) -> bool: ...

    @property
    def backlog(self) -> int: ...


class WithoutCreated:
    """`registry` as generate_latest() reads it, minus every `_created` sample.

    prometheus_client only offers a process-wide switch (disable_created_metrics), which
    would change every registry in the process (tests', libraries'); filtering at scrape
    time keeps the choice to this registry, and a scrape is rare next to requests."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family


class UsageLogCollector(Collector):
    """Write failures, rows dropped and rows waiting for a retry, read when scraped (the
    writer thread only bumps plain ints: no metric locks on its path)."""

    def __init__(self, usage: UsageLogHealth) -> None:
        self._usage = usage

    def collect(self) -> Iterable[Metric]:
        u = self._usage
        yield CounterMetricFamily(
            "context_proxy_usage_write_failures",
            "Failed writes to the usage log (disk full, I/O errors).",
            value=u.write_failures,
        )
        yield CounterMetricFamily(
            "context_proxy_usage_rows_dropped",
            "Usage rows lost: the retry queue was full, or the log was closed.",
            value=u.dropped,
        )
        yield GaugeMetricFamily(
            "context_proxy_usage_rows_pending",
            "Usage rows that could not be written yet and wait for a retry.",
            value=u.backlog,
        )
        yield GaugeMetricFamily(
            "context_proxy_usage_log_failing",
            "1 while the usage log cannot be written.",
            value=1 if u.failing else 0,
        )
