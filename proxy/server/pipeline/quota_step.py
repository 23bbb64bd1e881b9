"""Quota step: a team whose hard quota is spent is refused before anything goes upstream,
and an admitted request holds the tokens and dollars it may use until it is charged, so
that requests admitted at once cannot overshoot the quota by more than one request."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from proxy.errors import InvalidRequest, QuotaExceeded
from proxy.policy.model import MICRO
from proxy.server.core.services import Services
from proxy.server.pipeline.exchange import Exchange


def check_quota(
    services: Services, ex: Exchange, use: tuple[int, int] | None = None
) -> tuple[int, int]:
    """429 when the team's hard quota (tokens or dollars) is spent, what requests in flight
    hold counted; with `use` (the prompt as planned and the answer it may get), the request
    then holds its tokens and their price until it is booked: what it took now (tokens,
    millionths of a dollar). No await between the check and the hold: requests on the
    event loop are admitted one at a time."""
    assert ex.policy is not None
    quotas = ex.policy.quotas
    tokens = quotas.daily_tokens is not None or quotas.monthly_tokens is not None
    dollars = quotas.daily_usd is not None or quotas.monthly_usd is not None
    if not (tokens or dollars):
        return 0, 0
    if services.books.pending:  # the requests just finished count too
        services.books.drain()
    hold_micro = held = 0
    if dollars and quotas.hard_limit:
        hold_micro = check_spend(services, ex, use)
    if tokens:
        held = check_tokens(services, ex, sum(use) if use else 0)
    if hold_micro:  # held only once both quotas admitted it
        services.spend.hold(ex.policy.team, hold_micro)
        ex.held_micro_usd += hold_micro
    return held, hold_micro


async def hold_round(services: Services, ex: Exchange, use: tuple[int, int]) -> None:
    """A later upstream round of the request (a recall's continuation) held as the request
    was, here and in the fleet, under an entry of its own: `use`, its prompt and its answer
    limit. Refused: a QuotaExceeded, the round's holds let go (the earlier rounds' stay
    until the request is booked)."""
    await hold_in_fleet(services, ex, check_quota(services, ex, use))


async def hold_in_fleet(
    services: Services, ex: Exchange, round_held: tuple[int, int] | None = None
) -> None:
    """With --state and a hard quota: what the request holds (check_quota) is reserved in
    Redis against the whole fleet's counts and holds, so that replicas admitting at once
    cannot each spend the quota; `round_held`: what a later round of it took (hold_round),
    reserved as an entry of its own. Refused there: a 429, those holds let go. Redis not
    answering in time: the replica's own check stands (as without shared state), and an
    entry Redis makes late is cancelled when the request is booked."""
    policy = ex.policy
    amounts = round_held if round_held is not None else (ex.held, ex.held_micro_usd)
    if policy is None or not policy.quotas.hard_limit or amounts == (0, 0):
        return
    entry = ex.request_id
    if round_held is not None:
        entry = f"{ex.request_id}.r{len(ex.fleet_rounds) + 1}"
    dollars = policy.quotas.in_micro_usd()
    books = (services.shared, services.shared_spend)
    limits = ((policy.quotas.daily_tokens, policy.quotas.monthly_tokens),
              (dollars.daily_tokens, dollars.monthly_tokens))  # fmt: skip
    reserved, tried = [0, 0], [False, False]
    for k, (shared, amount, limit) in enumerate(zip(books, amounts, limits, strict=True)):
        if shared is None or amount <= 0 or limit == (None, None):
            continue
        tried[k] = True
        answer = await shared.reserve(policy.team, entry, amount, limit)
        if answer is False:
            for other, went in zip(books, tried, strict=True):
                if other is not None and went:  # what it held there, or may hold late
                    other.release(policy.team, entry, 0)
            services.quotas.release(policy.team, amounts[0])
            services.spend.release(policy.team, amounts[1])
            ex.held, ex.held_micro_usd = ex.held - amounts[0], ex.held_micro_usd - amounts[1]
            what = "token quota" if k == 0 else "budget"
            period = "day" if limit[0] is not None else "month"
            raise QuotaExceeded(
                f"Team {policy.team!r} has used its {what}: the requests the whole fleet "
                "has served and holds for those in flight reach it.",
                seconds_until_reset(period),
            )
        if answer:
            reserved[k] = amount
    if round_held is None:
        ex.fleet_held = (reserved[0], reserved[1])
        ex.fleet_tried = (tried[0], tried[1])
    elif any(tried):  # let go (as cancelled: its use is counted with the request's) when booked
        ex.fleet_rounds.append(entry)


def check_tokens(services: Services, ex: Exchange, expected: int) -> int:
    """429 when the team's token quota is spent; the tokens the request holds now."""
    assert ex.policy is not None
    quotas, team, book = ex.policy.quotas, ex.policy.team, services.quotas
    ex.quota = status = book.status(team, quotas, ex.policy.thresholds)
    if not quotas.hard_limit or status.limit is None:
        return 0
    used = status.used + book.held.get(team, 0)
    if used >= status.limit:
        period = status.period or "day"
        raise QuotaExceeded(
            f"Team {team!r} has used its {period} token quota "
            f"({min(used, status.used):,} used, {used - status.used:,} held by requests "
            f"in flight, of {status.limit:,}).",
            seconds_until_reset(period),
        )
    if expected <= 0:
        return 0
    book.hold(team, expected)
    ex.held += expected
    return expected


def check_spend(services: Services, ex: Exchange, use: tuple[int, int] | None) -> int:
    """429 when the team's hard dollar quota is spent (what its answered requests cost,
    and what those in flight may cost); 400 for a model no price is known for (a name the
    bundled map lacks would otherwise cost nothing). With `use`, what the request may cost
    at most, in millionths of a dollar: its prompt at the dearest input rate (a cache
    write) and its answer limit at the output rate."""
    assert ex.policy is not None
    team, policy = ex.policy.team, ex.policy
    # A passthrough route's model is read from its answer: priced when it is booked.
    prices = services.windows.policy_prices(ex.model, policy) if ex.model else None
    if prices is None and ex.model:
        raise InvalidRequest(
            f"Team {team!r} has a hard dollar quota and the model {ex.model!r} has no known "
            "price: give it one in the team's policy (models: {name: {input_usd_per_mtok: "
            "..., output_usd_per_mtok: ...}}) or use a priced model name.",
            param="model",
            code="model_not_priced",
        )
    spent = services.spend.status(team, policy.quotas.in_micro_usd(), policy.thresholds)
    held = services.spend.held.get(team, 0)
    if spent.limit is not None and spent.used + held >= spent.limit:
        period = spent.period or "day"
        raise QuotaExceeded(
            f"Team {team!r} has spent its {period} budget "
            f"(${spent.used / MICRO:,.2f} spent and ${held / MICRO:,.2f} held by requests "
            f"in flight, of ${spent.limit / MICRO:,.2f}).",
            seconds_until_reset(period),
        )
    if use is None or prices is None:
        return 0
    prompt, answer = use
    dearest_input = max(prices.input, prices.written(), prices.written(long=True))
    return max(1, math.ceil((prompt * dearest_input + answer * prices.output) * MICRO))


def expected_use(prompt: int, body: dict[str, Any], answer_hold: int) -> tuple[int, int]:
    """What a request may use at most: its prompt, and the output it allows (`max_tokens`,
    `max_completion_tokens`, `max_output_tokens`, or `answer_hold` when it sets none) for
    each of the `n` answers it asks for."""
    limits = (body.get(k) for k in ("max_completion_tokens", "max_tokens", "max_output_tokens"))
    allowed = next((n for n in limits if type(n) is int and n > 0), answer_hold)
    answers = body.get("n")
    return prompt, allowed * (answers if type(answers) is int and answers > 1 else 1)


def refuse_unmetered(ex: Exchange, body: dict[str, Any]) -> bool:
    """Whether the request is a background response (`background: true`): its upstream
    answers "queued" without usage, and its answer is read later (`GET
    /v1/responses/{id}`), past the proxy's metering. A team under a hard quota is refused
    one (400 `background_not_metered`): its cost cannot be held to the quota. Others are
    charged its answer at its limit (Exchange.answer_floor)."""
    if body.get("background") is not True:
        return False
    assert ex.policy is not None
    quotas = ex.policy.quotas
    limits = (quotas.daily_tokens, quotas.monthly_tokens, quotas.daily_usd, quotas.monthly_usd)
    if quotas.hard_limit and any(limit is not None for limit in limits):
        raise InvalidRequest(
            f"Team {ex.policy.team!r} has a hard quota, and a background response's cost "
            "cannot be held to it: its answer is read later, past the proxy. Send it "
            "without `background`, or stream it.",
            param="background",
            code="background_not_metered",
        )
    return True


def seconds_until_reset(period: str, now: datetime | None = None) -> int:
    """Seconds until the quota's period ends (UTC midnight, or the first of next month)."""
    now = now or datetime.now(UTC)
    midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "month":
        midnight = (now.replace(day=28) + timedelta(days=4)).replace(
            day=1, hour=0, minute=0, second=0, microsecond=0
        )
    return max(1, int((midnight - now).total_seconds()))
