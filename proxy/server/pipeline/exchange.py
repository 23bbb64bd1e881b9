"""One chat-completion exchange: what happened to it, as headers, a usage row and metrics."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from proxy.policy.model import MICRO
from proxy.server.core.request_ids import new_request_id
from proxy.server.core.responses import header_value
from proxy.server.pipeline.booked import after_booking, charge_spend, let_go_holds, settle_rates
from proxy.tokens import CACHE_WRITES, LONG_CACHE_WRITES, Cache, billed, policy_model
from proxy.types import Level
from proxy.usage import OTHER, UsageRecord, level_for, utc_iso

_LEVELS = {level: level.value.encode("ascii") for level in Level}

if TYPE_CHECKING:
    from proxy.planner import PlanOutcome
    from proxy.policy import Policy
    from proxy.server.core.services import Services
    from proxy.telemetry import RequestTrace
    from proxy.usage import QuotaStatus


log = logging.getLogger("context_proxy.requests")

# More tokens than any request can use: an upstream's count past it is not booked.
MAX_REPORTED_TOKENS = 100_000_000


def _possible(count: object) -> bool:
    return type(count) is int and 0 <= count <= MAX_REPORTED_TOKENS


class Figures(NamedTuple):
    """A plan's figures the usage row needs: kept past the request, unlike its outcome
    (which holds the whole body)."""

    context_window: int | None
    budget: int | None
    tokens_before: int
    tokens_after: int
    dropped: int
    truncated: int
    summarized: int
    deduped: int


@dataclass(slots=True)
class Exchange:
    """Accumulates the facts of one request as it goes down the pipeline."""

    request_id: str = field(default_factory=new_request_id)
    started: float = field(default_factory=time.perf_counter)
    policy: Policy | None = None
    model: str = ""
    stream: bool = False
    outcome: PlanOutcome | None = None
    quota: QuotaStatus | None = None
    upstream_started: float | None = None
    upstream_ended: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    usage_from_upstream: bool = False
    estimated_completion: int = 0
    # Charged as the answer at least when the upstream reports no usage: what a request
    # whose answer the proxy never reads may have cost (a billed passthrough route's, a
    # background response's), its answer limit.
    answer_floor: int = 0
    answered: bool = False  # the upstream served an answer (only then is a quota charged)
    cached_tokens: int | None = None  # as the upstream reported them; None when it did not
    cache_written: tuple[int, int] = (0, 0)  # cache writes reported, of them for an hour
    api: str = "chat"  # "chat" or "responses": which API the client called
    held: int = 0  # tokens held against a hard quota until the request is booked
    held_micro_usd: int = 0  # and millionths of a dollar, against a hard dollar quota
    fleet_held: tuple[int, int] = (0, 0)  # of those, reserved in Redis (--state): let go there
    fleet_tried: tuple[bool, bool] = (False, False)  # a reserve sent there (answered or not)
    fleet_rounds: list[str] = field(default_factory=list)  # later rounds' own entries there
    count_factor: float = 1.0  # the estimate's factor the request was counted with (1: exact)
    count_upstream: str = ""  # where it goes: an estimate is calibrated per upstream
    countable: bool = True  # all its parts' cost known (no URL document, no server tool)
    trace: RequestTrace | None = None  # its spans, when tracing is on
    rate_key: str | None = None  # the caller's key's bucket name, when its team limits keys
    rate_taken: float = 0.0  # tokens taken from its tokens-per-minute buckets, until booked
    rate_buckets: tuple[tuple[str, int], ...] = ()  # those buckets, with their limits
    rate_headers: list[tuple[bytes, bytes]] = field(default_factory=list)  # x-ratelimit-*
    recall_rounds: int = 0  # answers the proxy continued after serving context_recall
    recalled_tokens: int = 0  # tokens of the tool's answers it served
    # Set by finish, read by book: when and how it ended, and the plan's figures.
    ended: float = 0.0
    ended_at: float = 0.0  # time.time(), for the row's timestamp
    status: int = 0
    error: str | None = None
    figures: Figures | None = None

    @property
    def level(self) -> Level:
        o = self.outcome if self.outcome is not None else self.figures  # before / after finish
        if self.policy is None or o is None or o.budget is None:
            return Level.NORMAL
        if o.budget <= 0:  # no room at all (an answer limit that fills the window): refused
            return Level.CRITICAL if o.tokens_before > 0 else Level.NORMAL
        return level_for(o.tokens_before / o.budget, self.policy.thresholds)

    def context_headers(self) -> list[tuple[bytes, bytes]]:
        """The contract's x-context-* headers (what is known so far), encoded for the
        response: names are constants and values numbers or our own names, so no header
        needs the check an upstream's header gets (27 of those per request cost ~25 µs)."""
        o, policy = self.outcome, self.policy
        headers = [
            (b"x-request-id", self.request_id.encode("ascii")),
            (b"x-context-policy", header_value(policy.name) if policy else b"none"),
            (b"x-context-level", _LEVELS[self.level]),
        ]
        if o is not None:
            window, budget = o.context_window, o.budget
            headers += (
                (b"x-context-window", b"%d" % window if window else b"unknown"),
                (b"x-context-budget", b"%d" % budget if budget is not None else b"none"),
                (b"x-context-tokens-before", b"%d" % o.tokens_before),
                (b"x-context-tokens-after", b"%d" % o.tokens_after),
                (b"x-context-trimmed", b"%d" % o.trimmed),
            )
        if self.quota is not None and self.quota.limit is not None:
            headers.append((b"x-context-quota-level", _LEVELS[self.quota.level]))
        if self.rate_headers:
            headers += self.rate_headers
        return headers

    def take_usage(self, usage: Any) -> None:
        """Read an upstream `usage` object, if it is one: chat completions' (`prompt_tokens`,
        `completion_tokens`, `prompt_tokens_details.cached_tokens`) or the Responses API's
        (`input_tokens`, `output_tokens`, `input_tokens_details.cached_tokens`)."""
        if not isinstance(usage, dict):
            return
        prompt = usage.get("prompt_tokens")
        if prompt is not None:
            completion, details = usage.get("completion_tokens"), usage.get("prompt_tokens_details")
        else:
            prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
            details = usage.get("input_tokens_details")
        # `type(..) is int`: a JSON true is not a count; nor is a negative or absurd one
        # (booked as reported, it would refund a team's quota): then the row is estimated.
        if _possible(prompt) and _possible(completion):
            self.prompt_tokens, self.completion_tokens = prompt, completion
            self.usage_from_upstream = True
        if isinstance(details, dict):
            cached = details.get("cached_tokens")
            if type(cached) is int and cached >= 0:
                self.cached_tokens = cached
            written, long = details.get(CACHE_WRITES), details.get(LONG_CACHE_WRITES)
            if type(written) is int and written > 0:
                self.cache_written = (written, long if type(long) is int and long > 0 else 0)

    def finish(self, services: Services, status: int, error: str | None = None) -> None:
        """The exchange is over: book it (services.books, within milliseconds). Its
        outcome is let go here (the row needs only its figures): the context headers,
        which read it, are taken before."""
        self.ended, self.ended_at = time.perf_counter(), time.time()
        self.status, self.error = status, error
        o = self.outcome
        if o is not None:
            self.figures = Figures(
                o.context_window, o.budget, o.tokens_before, o.tokens_after,
                o.dropped, o.truncated, o.summarized, o.deduped,
            )  # fmt: skip
            self.outcome = None
        services.books.add(self, services)

    def book(self, services: Services) -> UsageRecord:
        """Write the usage row, update quotas, thresholds and metrics (after finish)."""
        now, status, error = self.ended, self.status, self.error
        o, policy = self.figures, self.policy
        team = policy.team if policy else "unknown"
        # Quotas count only what the upstream served: a request that never got an answer
        # (unreachable, timed out, the client gone first) is charged nothing.
        answered = self.answered or self.usage_from_upstream
        if self.usage_from_upstream:
            prompt, completion = self.prompt_tokens or 0, self.completion_tokens or 0
            source = "upstream"
        else:
            prompt = o.tokens_after if (o is not None and answered) else 0
            completion = max(self.estimated_completion, self.answer_floor) if answered else 0
            source = "estimated"
        total = prompt + completion
        if total and policy is not None:  # counted in the fleet as its hold goes, if it has one
            services.quotas.add(team, total, shared=bool(self.fleet_held[0]))
        book = services.quotas
        quota = book.status(team, policy.quotas, policy.thresholds) if policy else None
        budget = o.budget if o else None
        utilization = (o.tokens_before / budget) if (o and budget) else None
        level, tokens_before = self.level, o.tokens_before if o else 0
        tokens_after = o.tokens_after if o else 0
        cost = saved = None
        prices = services.windows.policy_prices(self.model, policy) if self.model else None
        if prices is not None:
            # Trimming saved only on a request the upstream served and trimming changed: one
            # it never answered would have cost nothing untrimmed either.
            trimmed = answered and tokens_before != tokens_after
            cache = Cache(self.cached_tokens or 0, *self.cache_written)
            trim = (tokens_before, tokens_after) if trimmed else None
            cost, saved = billed(prices, (prompt, completion), cache, trim)
        spent = charge_spend(services, policy, team, cost, bool(self.fleet_held[1]))
        let_go_holds(self, services, team, (total, round((cost or 0) * MICRO)))  # for the used
        settle_rates(self, services, total)
        # Positional, in the field order (ts first): with 32 keywords the call alone cost
        # ~3 µs of every request. tests/usage/test_finish_row.py checks each field by name.
        record = UsageRecord(
            utc_iso(self.ended_at),  # ts
            self.request_id,
            team,
            self.model,
            status,
            self.stream,
            o.context_window if o else None,
            budget,
            tokens_before,
            tokens_after,
            o.dropped if o else 0,
            o.truncated if o else 0,
            o.summarized if o else 0,
            o.deduped if o else 0,
            prompt,  # prompt_tokens
            completion,  # completion_tokens
            total,  # total_tokens
            source,  # usage_source
            None if utilization is None else round(utilization, 4),
            level,
            quota.used if quota else 0,  # quota_used
            quota.limit if quota else None,  # quota_limit
            quota.level if quota else Level.NORMAL,  # quota_level
            round((now - self.started) * 1000, 3),  # latency_ms
            self._upstream_ms(now),
            error,
            self.api,  # kind: the API the client called ("summary": the proxy's own calls)
            policy.name if policy else "none",
            self.cached_tokens,
            self.api,
            cost,  # cost_usd
            saved,  # saved_usd
            quota.period if quota and quota.limit is not None else None,  # quota_period
            None if spent is None else (spent.used / MICRO),  # spend_usd
            None if spent is None or spent.limit is None else spent.limit / MICRO,
            Level.NORMAL if spent is None else spent.level,  # spend_level
            None if spent is None else spent.period,  # spend_period
            self.recall_rounds,
            self.recalled_tokens,
        )
        services.usage.write(record)
        after_booking(self, services, record, self._model_label(services, status))
        if status >= 500:  # the operator's signal that an upstream is failing; ids, no content
            log.warning(
                "request failed upstream",
                extra={
                    "request_id": self.request_id,
                    "team": team,
                    "model": self.model[:200],
                    "status": status,
                    "error": error,
                },
            )
        services.metrics.observe_record(record, self._model_label(services, status))
        if policy is not None:
            if services.thresholds.observe(team, self.model, level, utilization):
                services.metrics.threshold_event(team, level.value)
            if quota is not None and quota.limit is not None:
                services.metrics.set_quota(team, quota.used, quota.limit)
                if services.thresholds.observe(
                    team, self.model, quota.level, quota.used / quota.limit, source="quota"
                ):
                    services.metrics.threshold_event(team, quota.level.value, "quota")
        return record

    def _model_label(self, services: Services, status: int) -> str:
        """The metrics' model label: a model the policy or litellm's map knows, else
        `other`; `unauthenticated` or `invalid` for a request refused before its model
        counted. Clients choose model names: only known ones may become series."""
        if self.policy is None or status == 401:
            return "unauthenticated"
        if not self.model:
            return "invalid"
        known = (
            policy_model(self.model, self.policy) is not None
            or services.windows.registry_window(self.model) is not None
        )
        return self.model if known else OTHER

    def _upstream_ms(self, now: float) -> float | None:
        if self.upstream_started is None:
            return None
        end = self.upstream_ended if self.upstream_ended is not None else now
        return round((end - self.upstream_started) * 1000, 3)
