"""The chat-completions pipeline, top to bottom, and the plan endpoint."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from proxy.errors import ProxyError, QuotaExceeded, UpstreamUnreachable
from proxy.planner import PlanOutcome, Refused
from proxy.policy import Policy
from proxy.server import responses
from proxy.server.auth import (
    headers_not_forwarded,
    require_admin,
    resolve_policy,
    upstream_authorization,
)
from proxy.server.chat_guards import checked_model, internal_error
from proxy.server.disconnect import ClientGone, cancel_on_disconnect
from proxy.server.exchange import Exchange, estimate_completion
from proxy.server.plan_step import off_loop, plan, plan_in_thread, tag_marks, tokenizer_for
from proxy.server.request_body import parse_chat_body, read_body
from proxy.server.services import Services
from proxy.summaries import Lookup, SummaryTarget
from proxy.types import Tokenizer
from proxy.upstream import (
    StreamTap,
    Timeouts,
    UpstreamBroke,
    UpstreamResponse,
    clean_headers,
    error_event,
)

# The proxy reads usage from the answer, so it must come unencoded; and it sends its own
# body, so the client's content-type and content-length must not go along with the proxy's
# (two Content-Type headers make aiohttp-based upstreams answer 400).
NOT_FORWARDED = frozenset({"accept-encoding", "content-type", "content-length"})


async def chat_completions(request: Request) -> Response:
    services: Services = request.app.state.services
    ex = Exchange(services.ids.next())
    try:
        policies = services.policies.current
        # Who is calling, before reading a byte of the body: a refused caller's body is
        # neither read nor recorded.
        ex.policy = policy = resolve_policy(policies, request.headers)
        raw = await read_body(request, services.settings.max_body_bytes)
        body = parse_chat_body(raw)
        ex.model, ex.stream = checked_model(body), body.get("stream") is True
        check_quota(services, ex)
        tokenizer = await tokenizer_for(services, ex.model, policy)
        cached = await services.summaries.lookup(policy, body)  # cached summaries: no waiting
        ex.outcome = outcome = await plan(
            services, policy, body, tokenizer, len(raw), cached, ex.request_id, tags=tag_marks(raw)
        )
        payload, client_wants_usage = forwarded_payload(raw, body, outcome, ex.stream)
        headers = clean_headers(request.headers, headers_not_forwarded(policies, NOT_FORWARDED))
        headers.append(("content-type", "application/json"))
        auth = upstream_authorization(policies, policy, request.headers, services.environ)
        if auth:
            headers.append(("authorization", auth))
        ex.upstream_started = time.perf_counter()
        target = SummaryTarget(
            upstream_url(services, policy, "/chat/completions"),
            headers,
            Timeouts(
                policy.upstream.timeout_s,
                policy.upstream.connect_timeout_s,
                policy.upstream.retries,
            ),
        )
        async with cancel_on_disconnect(request):
            upstream = await services.upstream.send(
                "POST", target.url, headers, payload, target.timeouts, ex.stream
            )
            streamed = ex.stream and upstream.status == 200
            ex.answered = 200 <= upstream.status < 300
            if streamed and "event-stream" in upstream.content_type:
                summarize_later(services, cached, outcome, target, tokenizer)
                return responses.streamed(
                    200,
                    upstream.headers,
                    relay_stream(services, ex, upstream, tokenizer, client_wants_usage),
                    ex.context_headers(),
                )
            answer = await upstream.read()
        ex.upstream_ended = time.perf_counter()
    except ProxyError as exc:
        if isinstance(exc, Refused):  # refused for length: its figures are known
            ex.outcome = exc.outcome
        ex.finish(services, exc.status, exc.code or exc.type)
        return responses.error(exc, ex.context_headers())
    except ClientGone:
        ex.answered = False  # the answer was never read: nothing was served
        ex.finish(services, 499, "client_disconnected")
        return Response(status_code=499)  # nobody is listening: the closed answer is moot
    except Exception as exc:  # a bug: still an OpenAI-shaped answer and a usage row
        failure = internal_error(exc, ex.request_id)
        ex.finish(services, failure.status, failure.code)
        return responses.error(failure, ex.context_headers())
    response = finish_plain(services, ex, upstream, answer, tokenizer)
    if 200 <= response.status_code < 300:
        summarize_later(services, cached, outcome, target, tokenizer)
    response.keep = (raw, body, outcome, payload, cached)  # freed once the answer is out
    return response


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


def check_quota(services: Services, ex: Exchange) -> None:
    """429 before anything goes upstream when the team's hard quota is spent."""
    assert ex.policy is not None
    quotas = ex.policy.quotas
    if quotas.daily_tokens is None and quotas.monthly_tokens is None:
        return
    ex.quota = status = services.quotas.status(ex.policy.team, quotas, ex.policy.thresholds)
    if quotas.hard_limit and status.exceeded:
        raise QuotaExceeded(
            f"Team {ex.policy.team!r} has used its {status.period or ''} token quota "
            f"({status.used:,} of {status.limit:,}).".replace("  ", " ")
        )


def forwarded_payload(
    raw: bytes, body: dict[str, Any], outcome: PlanOutcome, stream: bool
) -> tuple[bytes, bool]:
    """The bytes to send upstream, and whether the client itself asked for stream usage.

    An untouched request goes out as the very bytes it came in. For streams the proxy asks
    for the final usage chunk so that usage is exact; when only that is missing it is
    spliced into the original bytes rather than re-encoding the whole body.
    """
    options = body.get("stream_options")
    client_wants_usage = isinstance(options, dict) and options.get("include_usage") is True
    needs_usage = stream and not client_wants_usage
    if not outcome.changed and not needs_usage:
        return raw, client_wants_usage
    if not outcome.changed and "stream_options" not in body:
        start = raw.index(b"{") + 1
        return raw[:start] + b'"stream_options":{"include_usage":true},' + raw[start:], False
    forwarded = dict(outcome.body)
    if needs_usage:
        merged = dict(options) if isinstance(options, dict) else {}
        merged["include_usage"] = True
        forwarded["stream_options"] = merged
    return orjson.dumps(forwarded), client_wants_usage


def upstream_url(services: Services, policy: Policy, path: str) -> str:
    base = policy.upstream.base_url or services.settings.upstream
    return base.rstrip("/") + path


def finish_plain(
    services: Services,
    ex: Exchange,
    upstream: UpstreamResponse,
    answer: bytes,
    tokenizer: Tokenizer,
) -> responses.Plain:
    error: str | None = None
    status = upstream.status
    if 200 <= status < 300:
        try:
            parsed = orjson.loads(answer)
        except orjson.JSONDecodeError:
            exc = UpstreamUnreachable(
                "The upstream answered with something that is not JSON.",
                code="upstream_invalid_response",
            )
            ex.answered = False  # nothing usable was served
            ex.finish(services, exc.status, exc.code)
            return responses.error(exc, ex.context_headers())
        if isinstance(parsed, dict):
            ex.take_usage(parsed.get("usage"))
            if not ex.usage_from_upstream:
                ex.estimated_completion = estimate_completion(tokenizer, _answer_text(parsed))
    else:
        error = f"upstream_{status}"
    ex.finish(services, status, error)
    return responses.plain(status, upstream.headers, answer, ex.context_headers())


def _answer_text(parsed: dict[str, Any]) -> str:
    parts: list[str] = []
    for choice in parsed.get("choices") or ():
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            parts.append(message["content"])
    return "".join(parts)


async def relay_stream(
    services: Services,
    ex: Exchange,
    upstream: UpstreamResponse,
    tokenizer: Tokenizer,
    client_wants_usage: bool,
) -> AsyncGenerator[bytes]:
    """Pass events on as they arrive; on a break, one error event and a clean end."""
    tap = StreamTap(client_wants_usage)
    status, error = 200, None
    try:
        async for chunk in upstream.chunks():
            out = tap.feed(chunk)
            if out:
                yield out
        rest = tap.flush()
        if rest:
            yield rest
    except UpstreamBroke as exc:
        status = 504 if exc.timed_out else 502
        error = "upstream_timeout" if exc.timed_out else "upstream_stream_broken"
        yield error_event(f"The upstream stream ended abnormally: {exc}", "upstream_error", error)
    except (asyncio.CancelledError, GeneratorExit):  # the client left mid-stream
        status, error = 499, "client_disconnected"
        raise
    finally:
        upstream.close()
        ex.upstream_ended = time.perf_counter()
        ex.take_usage(tap.usage)
        if not ex.usage_from_upstream:
            text = tap.text()
            beyond = tap.estimated_chars_beyond(text)  # a long stream keeps only its start
            ex.estimated_completion = estimate_completion(tokenizer, text, beyond)
        ex.finish(services, status, error)


async def context_plan(request: Request) -> Response:
    """POST /v1/context/plan: the same pipeline, answered with the plan instead of forwarded."""
    services: Services = request.app.state.services
    ex = Exchange(services.ids.next())
    try:
        policies = services.policies.current
        if policies.admin_required:
            require_admin(policies, request.headers)
            policy = policies.by_team(request.query_params.get("team", policies.default.team))
        else:
            policy = resolve_policy(policies, request.headers)
        ex.policy = policy
        raw = await read_body(request, services.settings.max_body_bytes)
        body = parse_chat_body(raw)
        ex.model = checked_model(body)
        tokenizer = await tokenizer_for(services, ex.model, policy)
        cached = await services.summaries.lookup(policy, body)
        tags = tag_marks(raw)
        ex.outcome = outcome = await plan(
            services,
            policy,
            body,
            tokenizer,
            len(raw),
            cached,
            ex.request_id,
            fail_open=False,
            tags=tags,
        )
        if plan_in_thread(body, tokenizer, len(raw), tags):  # a big plan: a big report too
            answer = await off_loop(services, plan_answer, outcome)
        else:
            answer = plan_answer(outcome)
    except ProxyError as exc:
        if isinstance(exc, Refused):
            ex.outcome = exc.outcome
        return responses.error(exc, ex.context_headers())
    except Exception as exc:  # a bug, not the client's input (plan() sorts those out)
        return responses.error(internal_error(exc, ex.request_id), ex.context_headers())
    response = responses.plain(
        200, [("content-type", "application/json")], answer, ex.context_headers()
    )
    response.keep = (raw, body, outcome)  # freed once the answer is out
    return response


def plan_answer(outcome: PlanOutcome) -> bytes:
    """The plan endpoint's body: the rewritten request and its report."""
    return orjson.dumps({"request": outcome.body, "report": outcome.report.to_json()})
