"""Rate step: a team's (and a key's) requests and tokens per minute (usage/rate_limits.py).

A request is counted when it arrives, before its body is read: a runaway loop is refused
for the price of its headers. Its tokens (the prompt as planned and its answer limit, as a
hard quota holds them) are taken once it is planned, and settled when it is booked. A
refusal is a 429 in OpenAI's shape, with `Retry-After` (and `retry-after-ms`, which the
official SDKs wait for before they retry) and the `x-ratelimit-*` headers; an admitted
request's answer carries those headers too, for the tightest of its limits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from proxy.errors import RateLimited
from proxy.policy import Policy
from proxy.policy.model import RateLimitPolicy, hash_key
from proxy.server.core.services import Services
from proxy.server.pipeline.auth import bearer_token
from proxy.server.pipeline.exchange import Exchange
from proxy.usage.rate_limits import Draw, Level, Refused, reset_text

KEY_DIGITS = 16  # of a key's hash: the name of its buckets (never the key)
_NO_LIMITS = RateLimitPolicy()


def key_name(policy: Policy, headers: Mapping[str, str]) -> str | None:
    """The bucket name of the caller's key, when its team limits each key."""
    limits = policy.rate_limits
    if limits.key_requests_per_minute is None and limits.key_tokens_per_minute is None:
        return None
    presented = bearer_token(headers) or headers.get("x-api-key")
    if not presented:
        return None
    return hash_key(presented)[len("sha256:") : len("sha256:") + KEY_DIGITS]


def _limits(policy: Policy, key: str | None, kind: str) -> list[tuple[str, int]]:
    limits, team = policy.rate_limits, policy.team
    if limits == _NO_LIMITS:  # most teams: nothing to name or look up on every request
        return []
    found = [
        (f"t:{team}:{kind}", getattr(limits, f"{kind}_per_minute")),
        (f"k:{team}:{key}:{kind}", getattr(limits, f"key_{kind}_per_minute") if key else None),
    ]
    return [(bucket, limit) for bucket, limit in found if limit is not None]


async def count_request(services: Services, ex: Exchange, key: str | None) -> None:
    """The request counted against its team's and key's requests per minute; refused when
    one of those, or of its tokens per minute, has nothing left."""
    assert ex.policy is not None
    requests = _limits(ex.policy, key, "requests")
    tokens = _limits(ex.policy, key, "tokens")
    if not (requests or tokens):
        return
    ex.rate_key = key
    draws = [Draw(b, limit, 1.0, whole=True) for b, limit in requests]
    draws += [Draw(b, limit, 0.0) for b, limit in tokens]  # something left, nothing taken
    await _draw(services, ex, draws)


async def take_tokens(services: Services, ex: Exchange, use: Sequence[int]) -> None:
    """The request's tokens at most (prompt as planned, answer limit) taken from its
    tokens-per-minute buckets, for each upstream round it makes; settled when it is booked
    (settle_rates), on what all its rounds used."""
    assert ex.policy is not None
    tokens = _limits(ex.policy, ex.rate_key, "tokens")
    if not tokens:
        return
    amount = float(sum(use))
    await _draw(services, ex, [Draw(b, limit, amount) for b, limit in tokens])
    ex.rate_taken += amount  # settled as it is booked
    ex.rate_buckets = tuple(tokens)


async def _draw(services: Services, ex: Exchange, draws: list[Draw]) -> None:
    got = await services.rates.draw(draws)
    if isinstance(got, Refused):
        assert ex.policy is not None
        kind = got.bucket.rsplit(":", 1)[-1]
        services.metrics.rate_limited(ex.policy.team, kind)
        whose = "key" if got.bucket.startswith("k:") else "team"
        raise RateLimited(
            f"Rate limit reached for the {whose}'s {kind} per minute (limit "
            f"{got.per_minute:,}): try again in {reset_text(got.retry_after_s)}.",
            kind,
            got.retry_after_s,
            ratelimit_headers([Level(got.bucket, got.per_minute, 0.0, got.retry_after_s)]),
        )
    ex.rate_headers = ratelimit_headers(got, ex.rate_headers)


def ratelimit_headers(
    levels: Sequence[Level], earlier: Sequence[tuple[bytes, bytes]] = ()
) -> list[tuple[bytes, bytes]]:
    """OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` for the tightest
    bucket of each kind (what is left the least); kinds not drawn on keep `earlier`."""
    out = {name: value for name, value in earlier}
    for kind in ("requests", "tokens"):
        mine = [lv for lv in levels if lv.bucket.endswith(f":{kind}")]
        if not mine:
            continue
        tight = min(mine, key=lambda lv: lv.remaining / lv.per_minute)
        out[b"x-ratelimit-limit-" + kind.encode()] = b"%d" % tight.per_minute
        out[b"x-ratelimit-remaining-" + kind.encode()] = b"%d" % max(0, int(tight.remaining))
        out[b"x-ratelimit-reset-" + kind.encode()] = reset_text(tight.reset_s).encode()
    return list(out.items())
