"""Usage: the per-request ledger and its writer, quotas, Prometheus metrics."""

from proxy.usage.inclusion import InclusionLog, carries_ids, inclusion_line
from proxy.usage.labels import OTHER
from proxy.usage.ledger import (
    ThresholdWatch,
    UsageLog,
    UsageRecord,
    level_for,
    utc_iso,
    utc_now_iso,
)
from proxy.usage.metrics import Metrics, route_group
from proxy.usage.quotas import QuotaBook, QuotaStatus

__all__ = [
    "OTHER",
    "InclusionLog",
    "Metrics",
    "QuotaBook",
    "QuotaStatus",
    "ThresholdWatch",
    "UsageLog",
    "UsageRecord",
    "carries_ids",
    "inclusion_line",
    "level_for",
    "route_group",
    "utc_iso",
    "utc_now_iso",
]
