"""Usage recording: warning levels and their crossings, and reading the usage log back.

The per-request record is `record.UsageRecord`; the single-writer JSONL sink `writer.UsageLog`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from proxy.policy import ThresholdPolicy
from proxy.types import Level
from proxy.usage.log_files import bounded_lines, open_log
from proxy.usage.record import UsageRecord, utc_iso, utc_now_iso
from proxy.usage.writer import UsageLog

__all__ = [
    "ThresholdWatch",
    "UsageLog",
    "UsageRecord",
    "iter_records",
    "level_for",
    "utc_iso",
    "utc_now_iso",
]

logger = logging.getLogger("context_proxy.usage")

_MODEL_LOG_CHARS = 200  # model names come from clients: cap what goes into a warning line


def level_for(utilization: float | None, thresholds: ThresholdPolicy) -> Level:
    """`normal` below the warning threshold, `warning` from it, `critical` from critical."""
    if utilization is None:
        return Level.NORMAL
    if utilization >= thresholds.critical:
        return Level.CRITICAL
    if utilization >= thresholds.warning:
        return Level.WARNING
    return Level.NORMAL


_RANK = {Level.NORMAL: 0, Level.WARNING: 1, Level.CRITICAL: 2}


class ThresholdWatch:
    """Remembers each team's last level and logs one warning line when it rises."""

    def __init__(self, quiet_s: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        # Keyed by (team, source); teams come from policies, so this stays small.
        self._last: dict[tuple[str, str], Level] = {}
        # A team whose requests alternate between small and large would cross on every
        # large one: the log line for a (team, source, level) is repeated at most every
        # `quiet_s` seconds; the return value (and so the metric) still counts every crossing.
        self._logged: dict[tuple[str, str, Level], float] = {}
        self._quiet_s = quiet_s
        self._clock = clock

    def observe(
        self,
        team: str,
        model: str,
        level: Level,
        utilization: float | None,
        *,
        source: str = "context",
    ) -> bool:
        """Record `level`; True (and a log line) when it crossed into warning or critical."""
        key = (team, source)
        previous = self._last.get(key, Level.NORMAL)
        self._last[key] = level
        if _RANK[level] <= _RANK[previous]:
            return False
        now = self._clock()
        logged = self._logged.get((team, source, level))
        if logged is not None and now - logged < self._quiet_s:
            return True
        self._logged[(team, source, level)] = now
        # At warning, whatever the utilization level: trimming is the proxy's job, not a
        # fault; fields of their own (`threshold`, not `level`, which would overwrite the
        # log line's own level in the JSON lines), not JSON escaped inside the message.
        fields = {
            "event": "usage_threshold",
            "source": source,
            "team": team,
            "model": model[:_MODEL_LOG_CHARS],
            "threshold": level.value,
            "previous": previous.value,
            "utilization": None if utilization is None else round(utilization, 4),
        }
        logger.warning("usage threshold crossed", extra=fields)
        return True


def iter_records(path: str, offset: int = 0) -> Iterator[dict[str, Any]]:
    """Stream the log's records from `offset`, skipping blank, torn or malformed lines."""
    with open_log(path) as f:
        if offset:
            f.seek(offset)
        for line in bounded_lines(f):
            if len(line) < 2 or line[-1] != 0x0A:  # blank, or a last line still being written
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                yield obj
