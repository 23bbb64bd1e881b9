"""The Responses API pipeline (POST /v1/responses), top to bottom: the chat pipeline's steps,
with the body read into neutral chat messages for planning and written back as items."""

from __future__ import annotations

import dataclasses
import logging
import time
import traceback
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from proxy.errors import InvalidRequest
from proxy.items import Converted, output_text, to_chat, to_responses
from proxy.planner import PlanOutcome, unplanned
from proxy.server import responses
from proxy.server.answer_step import finish_plain, relay_stream
from proxy.server.auth import resolve_policy
from proxy.server.body_limits import INLINE_MAX_ITEMS, check_counts
from proxy.server.chat_guards import checked_model
from proxy.server.disconnect import cancel_on_disconnect
from proxy.server.exchange import Exchange
from proxy.server.forward_step import (
    failed,
    summarize_later,
    traced,
    upstream_target,
    upstream_url,
)
from proxy.server.plan_step import (
    PLAN_INLINE_MAX_BYTES,
    checked_density,
    off_loop,
    plan,
    tag_marks,
    tokenizer_for,
)
from proxy.server.quota_step import check_quota, expected_use, hold_in_fleet
from proxy.server.request_body import (
    check_responses_body,
    encoded,
    parse_model_body,
    read_body,
)
from proxy.server.services import Services
from proxy.tokens import cost_in_text
from proxy.upstream import ResponsesTap, response_error_event

PREVIOUS_NOTE = (
    "previous_response_id: the earlier turns live at the provider, not in this request; "
    "only what is sent is counted and trimmed"
)


async def create_response(request: Request) -> Response:
    services: Services = request.app.state.services
    ex = Exchange(services.ids.next())
    if services.tracing is not None:
        ex.trace = services.tracing.begin(request.headers)
    ex.api = "responses"
    try:
        policies = services.policies.current
        ex.policy = policy = resolve_policy(policies, request.headers)
        raw = await read_body(request, services.settings.max_body_bytes)
        await checked_density(services, policy.team, raw)
        body = check_responses_body(parse_model_body(raw))
        entries = check_counts(body.get("input"), "input", len(raw))
        ex.model, ex.stream = checked_model(body), body.get("stream") is True
        check_quota(services, ex)
        ex.count_upstream = services.settings.openai_base(policy)
        ex.countable = cost_in_text(body)
        tokenizer = await tokenizer_for(services, ex.model, policy, ex.count_upstream)
        ex.count_factor = tokenizer.factor
        # Reading items and writing them back is linear but Python: past a megabyte or
        # INLINE_MAX_ITEMS items and parts it runs in a worker thread, like a big plan, so
        # that the event loop keeps serving.
        big = len(raw) > PLAN_INLINE_MAX_BYTES or entries > INLINE_MAX_ITEMS
        conv = await off_loop(services, policy.team, to_chat, body) if big else to_chat(body)
        cached = await services.summaries.lookup(policy, conv.body)
        ex.outcome = outcome = await plan(
            services, policy, conv.body, tokenizer, len(raw), cached, ex.request_id,
            tags=tag_marks(raw),
        )  # fmt: skip
        note_previous(body, outcome)
        use = expected_use(outcome.tokens_after, body, policy.quotas.answer_hold_tokens)
        check_quota(services, ex, use)
        await hold_in_fleet(services, ex)
        if outcome.changed or conv.tagged:
            if big:
                payload = await off_loop(
                    services, policy.team, forwarded, services, ex, raw, body, conv
                )
            else:
                payload = forwarded(services, ex, raw, body, conv)
            outcome = ex.outcome  # unplanned, if writing it back failed
        else:
            payload = raw
        target = traced(
            upstream_target(services, request.headers, policies, policy, "/responses"), ex
        )
        # Summaries are chat completions, made at the same upstream with the same headers.
        summaries = dataclasses.replace(
            target, url=upstream_url(services, policy, "/chat/completions")
        )
        ex.upstream_started = time.perf_counter()
        async with cancel_on_disconnect(request):
            upstream = await services.upstream.send(
                "POST", target.url, target.headers, payload, target.timeouts, ex.stream
            )
            streamed = ex.stream and upstream.status == 200
            ex.answered = 200 <= upstream.status < 300
            if streamed and "event-stream" in upstream.content_type:
                summarize_later(services, cached, outcome, summaries, tokenizer)
                events = relay_stream(
                    services, ex, upstream, tokenizer, ResponsesTap(), response_error_event
                )
                return responses.streamed(200, upstream.headers, events, ex.context_headers())
            answer = await upstream.read()
        ex.upstream_ended = time.perf_counter()
    except Exception as exc:  # refused, gone, or a bug: a usage row and an OpenAI-shaped answer
        return failed(services, ex, exc)
    response = finish_plain(services, ex, upstream, answer, tokenizer, text_of=output_text)
    if 200 <= response.status_code < 300:
        summarize_later(services, cached, outcome, summaries, tokenizer)
    response.keep = (raw, body, outcome, payload, cached)  # freed once the answer is out
    return response


def forwarded(
    services: Services, ex: Exchange, raw: bytes, body: dict[str, Any], conv: Converted
) -> bytes:
    """The planned body's bytes; the request as it came if writing it back fails (a bug):
    like a failed plan, an untrimmed request may still fit, and the upstream's own error
    is better than the proxy's."""
    assert ex.outcome is not None and ex.policy is not None
    try:
        return encoded(rewritten(body, conv, ex.outcome))
    except InvalidRequest:
        raise  # the client's body, nested past what can be written back
    except Exception as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]  # the place only, never content
        where = f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} in {frame.name}"
        logging.getLogger("context_proxy.plan").error(
            "writing the Responses body back failed: %s at %s (request %s, team %s)",
            type(exc).__name__,
            where,
            ex.request_id,
            ex.policy.team,
        )
        services.metrics.plan_failures.labels(ex.policy.team).inc()
        ex.outcome = unplanned(conv.body, ex.outcome.context_window, type(exc).__name__)
        return raw


def rewritten(body: dict[str, Any], conv: Converted, outcome: PlanOutcome) -> dict[str, Any]:
    """The Responses body to forward: as it came when the plan changed nothing."""
    if not outcome.changed and not conv.tagged:
        return body
    return to_responses(body, conv, outcome.body["messages"])


def note_previous(body: dict[str, Any], outcome: PlanOutcome) -> None:
    """With `previous_response_id` the provider prepends turns the proxy never sees: the
    plan says so (the count covers only what is sent)."""
    if body.get("previous_response_id") and PREVIOUS_NOTE not in outcome.problems:
        outcome.problems.append(PREVIOUS_NOTE)


def report_json(outcome: PlanOutcome, body: dict[str, Any]) -> dict[str, Any]:
    """The plan report, with the previous_response_id note when the body has one."""
    report = outcome.report.to_json()
    if body.get("previous_response_id") and PREVIOUS_NOTE not in report["problems"]:
        report["problems"].append(PREVIOUS_NOTE)
    return report
