"""Quota step: a team whose hard quota is spent is refused before anything goes upstream,
and an admitted request holds the tokens it expects to use until it is charged, so that
requests admitted at once cannot overshoot the quota by more than one request."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from proxy.errors import QuotaExceeded
from proxy.policy.model import MICRO
from proxy.server.exchange import Exchange
from proxy.server.services import Services


def check_quota(services: Services, ex: Exchange, expected: int = 0) -> None:
    """429 when the team's hard quota is spent, its held tokens counted; with `expected`
    (the tokens the request will use, as far as known), the request then holds them
    (released when it is booked). No await between the check and the hold: requests on
    the event loop are admitted one at a time."""
    assert ex.policy is not None
    quotas = ex.policy.quotas
    tokens = quotas.daily_tokens is not None or quotas.monthly_tokens is not None
    dollars = quotas.daily_usd is not None or quotas.monthly_usd is not None
    if not (tokens or dollars):
        return
    if services.books.pending:  # the requests just finished count too
        services.books.drain()
    if dollars and quotas.hard_limit:
        check_spend(services, ex)
    if not tokens:
        return
    team, book = ex.policy.team, services.quotas
    ex.quota = status = book.status(team, quotas, ex.policy.thresholds)
    if not quotas.hard_limit or status.limit is None:
        return
    used = status.used + book.held.get(team, 0)
    if used >= status.limit:
        period = status.period or "day"
        raise QuotaExceeded(
            f"Team {team!r} has used its {period} token quota "
            f"({min(used, status.used):,} used, {used - status.used:,} held by requests "
            f"in flight, of {status.limit:,}).",
            seconds_until_reset(period),
        )
    if expected > 0:
        book.hold(team, expected)
        ex.held += expected


def check_spend(services: Services, ex: Exchange) -> None:
    """429 when the team's hard dollar quota is spent (what its answered requests cost at
    the bundled prices). Requests in flight hold no dollars: a team may overshoot by what
    those cost."""
    assert ex.policy is not None
    team, policy = ex.policy.team, ex.policy
    spent = services.spend.status(team, policy.quotas.in_micro_usd(), policy.thresholds)
    if spent.exceeded and spent.limit is not None:
        period = spent.period or "day"
        raise QuotaExceeded(
            f"Team {team!r} has spent its {period} budget "
            f"(${spent.used / MICRO:,.2f} of ${spent.limit / MICRO:,.2f}).",
            seconds_until_reset(period),
        )


def expected_tokens(prompt: int, body: dict[str, Any]) -> int:
    """What a request will use at most, as far as it says: its prompt, and the output it
    allows (`max_tokens`, `max_completion_tokens`, `max_output_tokens`) when it sets one."""
    limits = (body.get(k) for k in ("max_completion_tokens", "max_tokens", "max_output_tokens"))
    allowed = next((n for n in limits if type(n) is int and n > 0), 0)
    return prompt + allowed


def seconds_until_reset(period: str, now: datetime | None = None) -> int:
    """Seconds until the quota's period ends (UTC midnight, or the first of next month)."""
    now = now or datetime.now(UTC)
    midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "month":
        midnight = (now.replace(day=28) + timedelta(days=4)).replace(
            day=1, hour=0, minute=0, second=0, microsecond=0
        )
    return max(1, int((midnight - now).total_seconds()))
