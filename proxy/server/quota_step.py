"""Quota step: a team whose hard quota is spent is refused before anything goes upstream,
and an admitted request holds the tokens it expects to use until it is charged, so that
requests admitted at once cannot overshoot the quota by more than one request."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from proxy.errors import QuotaExceeded
from proxy.server.exchange import Exchange
from proxy.server.services import Services


def check_quota(services: Services, ex: Exchange, expected: int = 0) -> None:
    """429 when the team's hard quota is spent, its held tokens counted; with `expected`
    (the tokens the request will use, as far as known), the request then holds them
    (released when it is booked). No await between the check and the hold: requests on
    the event loop are admitted one at a time."""
    assert ex.policy is not None
    quotas = ex.policy.quotas
    if quotas.daily_tokens is None and quotas.monthly_tokens is None:
        return
    if services.books.pending:  # the requests just finished count too
        services.books.drain()
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
