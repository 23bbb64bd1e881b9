"""Forward step, shared by chat completions and the Responses API: quota, the upstream
target and its headers, summaries in the background, and a failure as a usage row and an
OpenAI-shaped answer."""

from __future__ import annotations

import logging

from starlette.datastructures import Headers
from starlette.responses import Response

from proxy.errors import ProxyError
from proxy.planner import PlanOutcome, Refused
from proxy.policy import Policy, PolicySet
from proxy.server.core import responses
from proxy.server.core.services import Services
from proxy.server.pipeline.auth import headers_not_forwarded, upstream_authorization
from proxy.server.pipeline.chat_guards import internal_error
from proxy.server.pipeline.disconnect import ClientGone
from proxy.server.pipeline.exchange import Exchange
from proxy.summaries import Lookup, SummaryTarget
from proxy.types import Tokenizer
from proxy.upstream import Timeouts, clean_headers

# The proxy reads usage from the answer, so it must come unencoded; and it sends its own
# body, so the client's content-type and content-length must not go along with the proxy's
# (two Content-Type headers make aiohttp-based upstreams answer 400).
NOT_FORWARDED = frozenset({"accept-encoding", "content-type", "content-length"})


def upstream_url(services: Services, policy: Policy, path: str) -> str:
    base = services.settings.openai_base(policy)
    return base.rstrip("/") + path


def upstream_target(
    services: Services, client: Headers, policies: PolicySet, policy: Policy, path: str
) -> SummaryTarget:
    """Where the request goes and with which headers: the client's minus hop-by-hop and
    proxy-only ones, a JSON content type, the upstream credentials the policy names."""
    headers = clean_headers(client.raw, headers_not_forwarded(policies, NOT_FORWARDED))
    headers.append(("content-type", "application/json"))
    auth = upstream_authorization(policies, policy, client, services.environ)
    if auth:
        headers.append(("authorization", auth))
    return SummaryTarget(
        upstream_url(services, policy, path),
        headers,
        Timeouts(
            policy.upstream.timeout_s,
            policy.upstream.connect_timeout_s,
            policy.upstream.retries,
        ),
    )


def traced(target: SummaryTarget, ex: Exchange) -> SummaryTarget:
    """With tracing on: the upstream call's span started, and its `traceparent` in place of
    the client's (the upstream's spans become children of the proxy's)."""
    if ex.trace is None:
        return target
    headers = [(k, v) for k, v in target.headers if k not in ("traceparent", "tracestate")]
    headers += ex.trace.upstream_headers(target.url)
    return SummaryTarget(target.url, headers, target.timeouts)


def summarize_later(
    services: Services,
    cached: Lookup,
    outcome: PlanOutcome,
    target: SummaryTarget,
    tokenizer: Tokenizer,
) -> None:
    """Summaries of what was dropped, made in the background once the answer is on its way;
    the same upstream and credentials as the request. Never raises into the request."""
    try:
        services.summaries.schedule(cached, outcome, target, tokenizer, services.spawn)
    except Exception:
        logging.getLogger("context_proxy.summaries").exception("scheduling summaries failed")


def cut_short(services: Services, ex: Exchange) -> None:
    """A request cancelled on its way (the server's shutdown ended its grace, or the client
    left while it waited upstream): its usage row, its holds let go. Whether the upstream
    served it is not known: its answer was never read, so nothing is charged."""
    if ex.ended:
        return  # booked already
    ex.answered = False
    stopping = services.stopping
    ex.finish(
        services, 503 if stopping else 499, "server_shutdown" if stopping else "client_disconnected"
    )


def failed(services: Services, ex: Exchange, exc: Exception) -> Response:
    """A request that ended before an answer: its usage row, and the answer to give."""
    if isinstance(exc, ProxyError):
        if isinstance(exc, Refused):  # refused for length: its figures are known
            ex.outcome = exc.outcome
        headers = ex.context_headers()
        ex.finish(services, exc.status, exc.code or exc.type)
        return responses.error(exc, headers)
    if isinstance(exc, ClientGone):
        ex.answered = False  # the answer was never read: nothing was served
        ex.finish(services, 499, "client_disconnected")
        return Response(status_code=499)  # nobody is listening: the closed answer is moot
    # A bug: still an OpenAI-shaped answer and a usage row.
    failure = internal_error(exc, ex.request_id)
    headers = ex.context_headers()
    ex.finish(services, failure.status, failure.code)
    return responses.error(failure, headers)
