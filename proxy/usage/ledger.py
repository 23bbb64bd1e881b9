"""Usage recording: the per-request record, warning levels, and the single-writer JSONL sink."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from proxy.policy import ThresholdPolicy
from proxy.types import Level
from proxy.usage.writer import UsageLog

__all__ = ["ThresholdWatch", "UsageLog", "UsageRecord", "iter_records", "level_for"]

logger = logging.getLogger("context_proxy.usage")

_MODEL_LOG_CHARS = 200  # model names come from clients: cap what goes into a warning line


def utc_now_iso() -> str:
    """Now as ISO 8601 UTC with millisecond precision and a 'Z' suffix."""
    return utc_iso(time.time())


def utc_iso(epoch_s: float) -> str:
    """`epoch_s` (time.time()) as ISO 8601 UTC with millisecond precision and a 'Z' suffix."""
    ms = int(epoch_s * 1000)
    # The seconds are formatted once per second (a datetime per row was ~3 µs of each request).
    return f"{_second_iso(ms // 1000)}.{ms % 1000:03d}Z"


@functools.lru_cache(maxsize=4)
def _second_iso(epoch_s: int) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%S")


@dataclass(slots=True)
class UsageRecord:
    """One line of the usage log: numbers and names only, never content or keys."""

    ts: str = field(default_factory=utc_now_iso)
    request_id: str = ""
    team: str = "default"
    model: str = ""
    status: int = 0
    stream: bool = False
    context_window: int | None = None
    budget: int | None = None
    tokens_before: int = 0
    tokens_after: int = 0
    dropped: int = 0
    truncated: int = 0
    summarized: int = 0
    deduped: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    usage_source: str = "estimated"  # "upstream" or "estimated"
    utilization: float | None = None
    level: Level = Level.NORMAL
    quota_used: int = 0
    quota_limit: int | None = None
    quota_level: Level = Level.NORMAL
    latency_ms: float = 0.0
    upstream_ms: float | None = None
    error: str | None = None
    kind: str = "chat"  # "chat", or "summary" for the proxy's own summarization calls
    policy: str = "default"
    cached_tokens: int | None = None  # prompt tokens the upstream served from its cache
    api: str = "chat"  # "chat" (chat completions) or "responses" (the Responses API)
    # Estimated USD from litellm's bundled prices; None when the model has no known price.
    cost_usd: float | None = None  # uncached prompt + cached prompt (cached price) + completion
    saved_usd: float | None = None  # prompt tokens trimming removed, at the input price

    def to_json_line(self) -> bytes:
        """The record as one JSON line ending in a newline (orjson handles slots and enums)."""
        return orjson.dumps(self, option=orjson.OPT_APPEND_NEWLINE)


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
        fields = {
            "event": "usage_threshold",
            "source": source,
            "team": team,
            "model": model[:_MODEL_LOG_CHARS],
            "level": level.value,
            "previous": previous.value,
            "utilization": None if utilization is None else round(utilization, 4),
        }
        logger.warning("usage threshold crossed %s", orjson.dumps(fields).decode(), extra=fields)
        return True


def iter_records(path: str, offset: int = 0) -> Iterator[dict[str, Any]]:
    """Stream the log's records from `offset`, skipping blank, torn or malformed lines."""
    with open(path, "rb") as f:
        if offset:
            f.seek(offset)
        for line in f:
            if len(line) < 2 or line[-1] != 0x0A:  # blank, or a last line still being written
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                yield obj
