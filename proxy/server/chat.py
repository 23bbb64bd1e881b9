"""The chat-completions pipeline, top to bottom."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from proxy.planner import PlanOutcome
from proxy.server import responses
from proxy.server.answer_step import finish_plain, relay_stream
from proxy.server.auth import resolve_policy
from proxy.server.body_limits import check_counts
from proxy.server.chat_guards import checked_model
from proxy.server.disconnect import cancel_on_disconnect
from proxy.server.exchange import Exchange
from proxy.server.forward_step import failed, summarize_later, traced, upstream_target
from proxy.server.plan_step import checked_density, plan, tag_marks, tokenizer_for
from proxy.server.quota_step import check_quota, expected_use, hold_in_fleet
from proxy.server.request_body import encoded, parse_chat_body, read_body
from proxy.server.services import Services
from proxy.tokens import cost_in_text
from proxy.upstream import StreamTap, error_event


async def chat_completions(request: Request) -> Response:
    services: Services = request.app.state.services
    ex = Exchange(services.ids.next())
    if services.tracing is not None:
        ex.trace = services.tracing.begin(request.headers)
    try:
        policies = services.policies.current
        # Who is calling, before reading a byte of the body: a refused caller's body is
        # neither read nor recorded.
        ex.policy = policy = resolve_policy(policies, request.headers)
        raw = await read_body(request, services.settings.max_body_bytes)
        await checked_density(services, policy.team, raw)
        body = parse_chat_body(raw)
        check_counts(body["messages"], "messages", len(raw))
        ex.model, ex.stream = checked_model(body), body.get("stream") is True
        check_quota(services, ex)
        ex.count_upstream = services.settings.openai_base(policy)
        ex.countable = cost_in_text(body)
        tokenizer = await tokenizer_for(services, ex.model, policy, ex.count_upstream)
        ex.count_factor = tokenizer.factor
        cached = await services.summaries.lookup(policy, body)  # cached summaries: no waiting
        ex.outcome = outcome = await plan(
            services, policy, body, tokenizer, len(raw), cached, ex.request_id, tags=tag_marks(raw)
        )
        use = expected_use(outcome.tokens_after, body, policy.quotas.answer_hold_tokens)
        check_quota(services, ex, use)
        await hold_in_fleet(services, ex)
        payload, client_wants_usage = forwarded_payload(raw, body, outcome, ex.stream)
        target = traced(
            upstream_target(services, request.headers, policies, policy, "/chat/completions"), ex
        )
        ex.upstream_started = time.perf_counter()
        async with cancel_on_disconnect(request):
            upstream = await services.upstream.send(
                "POST", target.url, target.headers, payload, target.timeouts, ex.stream
            )
            streamed = ex.stream and upstream.status == 200
            ex.answered = 200 <= upstream.status < 300
            if streamed and "event-stream" in upstream.content_type:
                summarize_later(services, cached, outcome, target, tokenizer)
                return responses.streamed(
                    200,
                    upstream.headers,
                    relay_stream(
                        services,
                        ex,
                        upstream,
                        tokenizer,
                        StreamTap(client_wants_usage),
                        error_event,
                    ),
                    ex.context_headers(),
                )
            answer = await upstream.read()
        ex.upstream_ended = time.perf_counter()
    except Exception as exc:  # refused, gone, or a bug: a usage row and an OpenAI-shaped answer
        return failed(services, ex, exc)
    response = finish_plain(services, ex, upstream, answer, tokenizer)
    if 200 <= response.status_code < 300:
        summarize_later(services, cached, outcome, target, tokenizer)
    response.keep = (raw, body, outcome, payload, cached)  # freed once the answer is out
    return response


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
    return encoded(forwarded), client_wants_usage
