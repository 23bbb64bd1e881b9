"""The usage log's record: one line per request, numbers and names only, never content or keys."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import orjson

from proxy.types import Level


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
    kind: str = "chat"  # the API the client called, or "summary" for the proxy's own calls
    policy: str = "default"
    cached_tokens: int | None = None  # prompt tokens the upstream served from its cache
    api: str = "chat"  # "chat" (chat completions) or "responses" (the Responses API)
    # Estimated USD from litellm's bundled prices; None when the model has no known price.
    cost_usd: float | None = None  # as billed: cache reads and writes at their prices, output
    saved_usd: float | None = None  # the untrimmed prompt's cost less the sent one's; may be < 0
    quota_period: str | None = None  # "day" or "month": the quota quota_used/limit are of
    # With dollar quotas (`quotas.daily_usd` / `monthly_usd`): the team's spend in the period
    # nearest its limit, after this row, against that limit; None without dollar quotas.
    spend_usd: float | None = None
    spend_limit_usd: float | None = None
    spend_level: Level = Level.NORMAL
    spend_period: str | None = None  # "day" or "month"
    # The rounds the proxy continued the answer after serving its context_recall tool (each
    # round's tokens are in the counts above), and the tokens of the tool's answers.
    recall_rounds: int = 0
    recalled_tokens: int = 0

    def to_json_line(self) -> bytes:
        """The record as one JSON line ending in a newline (orjson handles slots and enums)."""
        return orjson.dumps(self, option=orjson.OPT_APPEND_NEWLINE)
