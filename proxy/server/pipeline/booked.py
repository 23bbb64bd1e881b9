"""Around a usage row: the team's spend charged before it is written (its dollar quotas);
after it, the count calibration an estimated model's answer feeds, the spend thresholds, and
the request's trace, ended with the row's figures."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from proxy.policy.model import MICRO

if TYPE_CHECKING:
    from proxy.policy import Policy
    from proxy.server.core.services import Services
    from proxy.telemetry import RequestTrace
    from proxy.usage import UsageRecord
    from proxy.usage.quotas import QuotaStatus

log = logging.getLogger("context_proxy.requests")


class Booked(Protocol):
    """The exchange's facts this step reads (proxy.server.pipeline.exchange.Exchange)."""

    model: str
    policy: Policy | None
    count_factor: float
    count_upstream: str
    countable: bool
    usage_from_upstream: bool
    trace: RequestTrace | None
    upstream_started: float | None
    upstream_ended: float | None
    ended: float


class Holding(Protocol):
    """What an exchange holds against hard quotas until it is booked (quota_step.py)."""

    request_id: str
    held: int
    held_micro_usd: int
    fleet_held: tuple[int, int]
    fleet_tried: tuple[bool, bool]
    fleet_rounds: list[str]


def let_go_holds(ex: Holding, services: Services, team: str, used: tuple[int, int]) -> None:
    """The exchange's holds let go as it is booked: here, and in Redis (--state) at once,
    what it used (tokens, millionths of a dollar) counted in the fleet's counters in the
    same step; an entry it tried to reserve and did not hear back of, cancelled, and so
    are its later rounds' entries (what they used is counted with the request's)."""
    if ex.held:
        services.quotas.release(team, ex.held)
        ex.held = 0
    if ex.held_micro_usd:
        services.spend.release(team, ex.held_micro_usd)
        ex.held_micro_usd = 0
    shared = (services.shared, services.shared_spend)
    for book, amount, tried, spent in zip(shared, ex.fleet_held, ex.fleet_tried, used, strict=True):
        if book is not None and (amount or tried):
            book.release(team, ex.request_id, spent if amount else 0)
    for entry in ex.fleet_rounds:
        for book in shared:
            if book is not None:
                book.release(team, entry, 0)
    ex.fleet_held, ex.fleet_tried, ex.fleet_rounds = (0, 0), (False, False), []


class Rated(Protocol):
    """What an exchange took from its tokens-per-minute buckets (rate_step.py)."""

    rate_taken: float
    rate_buckets: tuple[tuple[str, int], ...]


def settle_rates(ex: Rated, services: Services, used: int) -> None:
    """The tokens the exchange took and did not use given back to its buckets (those it
    used beyond, taken): a refused or unanswered request gives back all it took."""
    if ex.rate_taken:
        for bucket, limit in ex.rate_buckets:
            services.rates.settle(bucket, limit, ex.rate_taken - used)
        ex.rate_taken = 0.0


def after_booking(ex: Booked, services: Services, record: UsageRecord, model_label: str) -> None:
    if (
        ex.count_factor != 1.0
        and ex.countable
        and ex.usage_from_upstream
        and record.tokens_after
        and record.prompt_tokens
    ):
        moved = services.counter.observe_reported(
            ex.model, record.tokens_after, ex.count_factor, record.prompt_tokens,
            ex.count_upstream,
        )  # fmt: skip
        if moved is not None:
            services.metrics.count_factor.labels(model_label).set(moved)
    limit, spent = record.spend_limit_usd, record.spend_usd
    if limit and spent is not None:
        share = spent / limit
        if services.thresholds.observe(
            record.team, record.model, record.spend_level, share, source="spend"
        ):
            services.metrics.threshold_event(record.team, record.spend_level.value, "spend")
    if ex.trace is not None:
        try:
            ex.trace.end(record, ex.upstream_started, ex.upstream_ended, ex.ended, model_label)
        except Exception:  # tracing must never cost a usage row or a request
            log.exception("ending the request's trace failed")
        ex.trace = None


def charge_spend(
    services: Services, policy: Policy | None, team: str, cost: float | None, shared: bool = False
) -> QuotaStatus | None:
    """Charge a row's cost to the team's spend (before the row is written, so the row says
    where the team stands; `shared`: counted in the fleet as its hold goes); with dollar
    quotas, the period nearest its limit, else None."""
    if policy is None:
        return None
    try:
        if cost is not None and cost > 0:
            services.spend.add(team, round(cost * MICRO), shared=shared)
        quotas = policy.quotas
        if quotas.daily_usd is None and quotas.monthly_usd is None:
            return None
        spent = services.spend.status(team, quotas.in_micro_usd(), policy.thresholds)
    except Exception:  # the row is written whatever the spend book does
        log.exception("charging the team's spend failed")
        return None
    return spent if spent.limit else None
