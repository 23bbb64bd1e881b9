"""What follows a usage row: the count calibration an estimated model's answer feeds, the
team's spend (its dollar quotas), and the request's trace, ended with the row's figures."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from proxy.policy.model import MICRO

if TYPE_CHECKING:
    from proxy.policy import Policy
    from proxy.server.services import Services
    from proxy.telemetry import RequestTrace
    from proxy.usage import UsageRecord

log = logging.getLogger("context_proxy.requests")


class Booked(Protocol):
    """The exchange's facts this step reads (proxy.server.exchange.Exchange)."""

    model: str
    policy: Policy | None
    count_factor: float
    usage_from_upstream: bool
    trace: RequestTrace | None
    upstream_started: float | None
    upstream_ended: float | None
    ended: float


def after_booking(ex: Booked, services: Services, record: UsageRecord, model_label: str) -> None:
    if (
        ex.count_factor != 1.0
        and ex.usage_from_upstream
        and record.tokens_after
        and record.prompt_tokens
    ):
        moved = services.counter.observe_reported(
            ex.model, record.tokens_after, ex.count_factor, record.prompt_tokens
        )
        if moved is not None:
            services.metrics.count_factor.labels(model_label).set(moved)
    if record.cost_usd is not None and record.cost_usd > 0 and ex.policy is not None:
        spent_on(services, ex.policy, record)
    if ex.trace is not None:
        try:
            ex.trace.end(record, ex.upstream_started, ex.upstream_ended, ex.ended)
        except Exception:  # tracing must never cost a usage row or a request
            log.exception("ending the request's trace failed")
        ex.trace = None


def spent_on(services: Services, policy: Policy, record: UsageRecord) -> None:
    """Charge the row's cost to the team's spend; with dollar quotas, a crossing of their
    thresholds is logged and counted like a token quota's (source "spend")."""
    services.spend.add(record.team, round((record.cost_usd or 0.0) * MICRO))
    quotas = policy.quotas
    if quotas.daily_usd is None and quotas.monthly_usd is None:
        return
    spent = services.spend.status(record.team, quotas.in_micro_usd(), policy.thresholds)
    if spent.limit and services.thresholds.observe(
        record.team, record.model, spent.level, spent.used / spent.limit, source="spend"
    ):
        services.metrics.threshold_event(record.team, spent.level.value, "spend")
