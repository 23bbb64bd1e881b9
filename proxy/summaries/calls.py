"""Summary calls: one call to the upstream for a summary, its usage row, and the daily cap."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from proxy.errors import ProxyError
from proxy.policy import Policy
from proxy.tokens import Prices, request_cost
from proxy.types import Tokenizer
from proxy.upstream import Timeouts, Upstream
from proxy.usage import QuotaBook, UsageLog, UsageRecord


@dataclass(frozen=True, slots=True)
class SummaryTarget:
    """Where the request went: the summary call goes the same way, with the same credentials."""

    url: str
    headers: list[tuple[str, str]] = field(repr=False)  # holds credentials: never logged
    timeouts: Timeouts


class SummaryFailed(Exception):
    """A summary call that gave no summary; `tokens` it cost all the same."""

    def __init__(self, reason: str, tokens: int = 0) -> None:
        super().__init__(reason)
        self.tokens = tokens


def utc_day() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


class SpendBook:
    """Summary tokens per team today, plus what calls in flight may still spend: a call
    starts only if its worst case fits under the cap, so the cap is never exceeded."""

    def __init__(self, today: Callable[[], str] = utc_day) -> None:
        self._today = today
        self._teams: dict[str, tuple[str, int, int]] = {}  # team -> (day, spent, reserved)

    def _get(self, team: str) -> tuple[str, int, int]:
        day = self._today()
        last, spent, reserved = self._teams.get(team, (day, 0, 0))
        return (day, spent if last == day else 0, reserved)

    def spent(self, team: str) -> int:
        return self._get(team)[1]

    def reserve(self, team: str, cap: int | None, tokens: int) -> bool:
        day, spent, reserved = self._get(team)
        if cap is not None and spent + reserved + tokens > cap:
            return False
        self._teams[team] = (day, spent, reserved + tokens)
        return True

    def settle(self, team: str, reserved_tokens: int, spent_tokens: int) -> None:
        day, spent, reserved = self._get(team)
        self._teams[team] = (day, spent + spent_tokens, max(0, reserved - reserved_tokens))


@dataclass(frozen=True, slots=True)
class SummaryCall:
    """One summary to make: for whom, with which model, and the prompt."""

    policy: Policy
    model: str
    prompt: list[dict[str, str]]
    prompt_tokens: int  # the prompt's count by the request's tokenizer
    prices: Prices | None = None  # the model's prices, for the row's cost_usd


async def call_summary(
    upstream: Upstream,
    usage: UsageLog,
    quotas: QuotaBook,
    call: SummaryCall,
    target: SummaryTarget,
    tokenizer: Tokenizer,
) -> tuple[str, int]:
    """Make one summary; its usage row is written also when it fails. (text, tokens spent);
    raises SummaryFailed."""
    cfg = call.policy.summaries
    payload = {
        "model": call.model,
        "messages": call.prompt,
        limit_field(call.model): cfg.max_tokens,
    }
    started = time.perf_counter()
    status, error, text, reported = 0, None, "", None
    # No retries here: a failed summary is retried later, by the summarizer's backoff.
    timeouts = Timeouts(target.timeouts.total_s, target.timeouts.connect_s)
    try:
        answer = await upstream.send(
            "POST", target.url, target.headers, orjson.dumps(payload), timeouts, False
        )
        raw = await answer.read()
        status = answer.status
        if 200 <= status < 300:
            text, reported = parse_answer(raw)
            error = None if text else "summary_empty"
        else:
            error = f"upstream_{status}"
    except ProxyError as exc:
        status, error = exc.status, exc.code or exc.type
    if reported is not None:
        prompt, completion, source = reported[0], reported[1], "upstream"
    elif 200 <= status < 300:
        prompt, completion, source = call.prompt_tokens, tokenizer.count_text(text), "estimated"
    else:
        prompt, completion, source = 0, 0, "estimated"
    record = UsageRecord(
        request_id="sum_" + uuid.uuid4().hex,
        team=call.policy.team,
        model=call.model,
        status=status,
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        usage_source=source,
        latency_ms=round((time.perf_counter() - started) * 1000, 3),
        error=error,
        kind="summary",
        policy=call.policy.name,
        cost_usd=request_cost(call.prices, prompt, None, completion) if call.prices else None,
    )
    record.upstream_ms = record.latency_ms if status else None
    write_record(usage, quotas, call.policy, record)
    if error is not None:
        raise SummaryFailed(error, record.total_tokens)
    return text, record.total_tokens


def write_record(usage: UsageLog, quotas: QuotaBook, policy: Policy, record: UsageRecord) -> None:
    """The usage row of a summary call, its tokens counted against the team's quota."""
    if record.total_tokens:
        quotas.add(policy.team, record.total_tokens)
    quota = quotas.status(policy.team, policy.quotas, policy.thresholds)
    record.quota_used, record.quota_limit, record.quota_level = quota.used, quota.limit, quota.level
    usage.write(record)


def parse_answer(raw: bytes) -> tuple[str, tuple[int, int] | None]:
    """The summary text of a chat-completion answer, and its (prompt, completion) usage."""
    try:
        parsed: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "", None
    if not isinstance(parsed, dict):
        return "", None
    text = ""
    choices = parsed.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            text = message["content"].strip()
    usage = parsed.get("usage")
    if isinstance(usage, dict):
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if isinstance(prompt, int) and isinstance(completion, int):
            return text, (prompt, completion)
    return text, None


# Reasoning models refuse `max_tokens` and take `max_completion_tokens` instead.
_COMPLETION_LIMIT_FAMILIES = ("o1", "o3", "o4", "gpt-5")


def limit_field(model: str) -> str:
    """The request field that caps the summary's length for `model`."""
    name = model.rsplit("/", 1)[-1].lower()
    return "max_completion_tokens" if name.startswith(_COMPLETION_LIMIT_FAMILIES) else "max_tokens"
