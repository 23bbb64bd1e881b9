"""Usage: the per-request record and its writer, thresholds, quotas, Prometheus metrics."""

from proxy.usage.inclusion import InclusionLog, carries_ids, inclusion_line
from proxy.usage.labels import OTHER
from proxy.usage.ledger import ThresholdWatch, level_for
from proxy.usage.metrics import Metrics, route_group
from proxy.usage.quotas import QuotaBook, QuotaStatus
from proxy.usage.record import UsageRecord, utc_iso, utc_now_iso
from proxy.usage.writer import UsageLog

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
