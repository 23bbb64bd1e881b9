"""What follows a usage row: the count calibration an estimated model's answer feeds, and
the request's trace, ended with the row's figures."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from proxy.server.services import Services
    from proxy.telemetry import RequestTrace
    from proxy.usage import UsageRecord

log = logging.getLogger("context_proxy.requests")


class Booked(Protocol):
    """The exchange's facts this step reads (proxy.server.exchange.Exchange)."""

    model: str
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
    if ex.trace is not None:
        try:
            ex.trace.end(record, ex.upstream_started, ex.upstream_ended, ex.ended)
        except Exception:  # tracing must never cost a usage row or a request
            log.exception("ending the request's trace failed")
        ex.trace = None
