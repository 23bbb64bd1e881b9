"""Who is calling: proxy key -> team policy, and the credentials sent upstream."""

from __future__ import annotations

import functools
from collections.abc import Mapping

from proxy.errors import Forbidden, Unauthorized
from proxy.policy import Policy, PolicySet


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer ...` header, if any."""
    value = headers.get("authorization")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def resolve_policy(policies: PolicySet, headers: Mapping[str, str]) -> Policy:
    """The caller's policy: the default team in open mode, else the team owning the key."""
    if policies.open_mode:
        return policies.default
    # Anthropic's clients (Claude Code, the anthropic SDKs) send their key as `x-api-key`.
    policy = policies.for_key(bearer_token(headers) or headers.get("x-api-key"))
    if policy is None:
        # Never say which part was wrong, and never echo what was presented.
        raise Unauthorized(
            "Incorrect or missing proxy key. Send 'Authorization: Bearer <proxy key>' "
            "or 'x-api-key: <proxy key>'."
        )
    return policy


def require_admin(policies: PolicySet, headers: Mapping[str, str]) -> None:
    """Admin routes (/metrics, /v1/context/plan) need an admin key once a policy lists any."""
    if policies.admin_required and not policies.is_admin(bearer_token(headers)):
        raise Forbidden("This route needs an admin key: 'Authorization: Bearer <admin key>'.")


def require_metrics_reader(policies: PolicySet, headers: Mapping[str, str]) -> None:
    """/metrics names every team and its spend: with proxy keys it needs an admin key
    (none listed: nobody reads it) unless a policy says `metrics: public`; in open mode it
    is open until a policy lists admin keys."""
    if policies.metrics_public:
        return
    if policies.open_mode:
        require_admin(policies, headers)
    elif not policies.is_admin(bearer_token(headers)):
        how = "" if policies.admin_required else " (none is listed: add admin_keys to a policy)"
        raise Forbidden(
            f"/metrics needs an admin key: 'Authorization: Bearer <admin key>'{how}, "
            "or `metrics: public` in a policy."
        )


def upstream_authorization(
    policies: PolicySet, policy: Policy, headers: Mapping[str, str], environ: Mapping[str, str]
) -> str | None:
    """The Authorization header value to send upstream, or None to send none.

    Open mode passes the client's header through unchanged (falling back to the policy's
    key when the client sent none); with proxy keys the client's header is the proxy key,
    which never leaves the proxy, so only the policy's upstream key is sent.
    """
    own_key = environ.get(policy.upstream.api_key_env) if policy.upstream.api_key_env else None
    if policies.open_mode:
        client = headers.get("authorization")
        if client:
            return client
    return f"Bearer {own_key}" if own_key else None


# Headers some clients (Azure's SDK, Anthropic-style gateways) put credentials in.
_CREDENTIAL_HEADERS = frozenset({"api-key", "x-api-key", "proxy-authorization"})


def headers_not_forwarded(
    policies: PolicySet, extra: frozenset[str] = frozenset()
) -> frozenset[str]:
    """Client headers the upstream must not see: `Authorization` and cookies always (auth.py
    chooses the credentials), and in key mode every other credential header too, since a
    client may have put its proxy key there."""
    return _not_forwarded(policies.open_mode, extra)


@functools.lru_cache(maxsize=8)
def _not_forwarded(open_mode: bool, extra: frozenset[str]) -> frozenset[str]:
    drop = extra | {"authorization", "cookie"}
    return drop if open_mode else drop | _CREDENTIAL_HEADERS
