"""Anthropic's Messages API pipeline (POST /v1/messages), top to bottom: the chat
pipeline's steps, with the body read into neutral chat messages for planning and written
back as blocks; errors in Anthropic's shape; `count_tokens` answered from the proxy's own
count."""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response

from proxy.anthropic import Converted, anthropic_usage, error_json, message_text, to_chat
from proxy.anthropic.answer import error_event
from proxy.anthropic.events import MessagesTap
from proxy.anthropic.write import to_messages
from proxy.errors import InvalidRequest
from proxy.planner import PlanOutcome
from proxy.policy import Policy, PolicySet
from proxy.server import responses
from proxy.server.answer_step import finish_plain, relay_stream
from proxy.server.auth import resolve_policy
from proxy.server.body_limits import check_counts
from proxy.server.chat_guards import checked_model
from proxy.server.disconnect import cancel_on_disconnect
from proxy.server.exchange import Exchange, Figures
from proxy.server.forward_step import failed, traced, upstream_target
from proxy.server.plan_step import (
    PLAN_INLINE_MAX_BYTES,
    checked_density,
    off_loop,
    plan,
    tag_marks,
    tokenizer_for,
)
from proxy.server.quota_step import check_quota, expected_use, hold_in_fleet
from proxy.server.request_body import check_messages_body, encoded, parse_model_body, read_body
from proxy.server.services import Services
from proxy.summaries import SummaryTarget
from proxy.tokens import ChatTokenizer, cost_in_text


async def create_message(request: Request) -> Response:
    services: Services = request.app.state.services
    ex = Exchange(services.ids.next())
    if services.tracing is not None:
        ex.trace = services.tracing.begin(request.headers)
    ex.api = "messages"
    try:
        policies = services.policies.current
        ex.policy = policy = resolve_policy(policies, request.headers)
        base = services.settings.anthropic_base(policy)
        if base is None:  # refused before a byte of the body is read
            raise no_anthropic_upstream(policy)
        raw = await read_body(request, services.settings.max_body_bytes)
        await checked_density(services, policy.team, raw)
        body = check_messages_body(parse_model_body(raw))
        check_counts(body["messages"], "messages", len(raw))
        ex.model, ex.stream = checked_model(body), body.get("stream") is True
        check_quota(services, ex)
        ex.count_upstream, ex.countable = base, cost_in_text(body)
        tokenizer = await tokenizer_for(services, ex.model, policy, base)
        ex.count_factor = tokenizer.factor
        big = len(raw) > PLAN_INLINE_MAX_BYTES
        conv = await off_loop(services, policy.team, to_chat, body) if big else to_chat(body)
        ex.outcome = outcome = await plan(
            services, policy, conv.body, tokenizer, len(raw), None, ex.request_id,
            tags=tag_marks(raw),
        )  # fmt: skip
        use = expected_use(outcome.tokens_after, body, policy.quotas.answer_hold_tokens)
        check_quota(services, ex, use)
        await hold_in_fleet(services, ex)
        payload = raw
        if outcome.changed or conv.tagged:
            if big:
                payload = encoded(
                    await off_loop(services, policy.team, rewritten, body, conv, outcome)
                )
            else:
                payload = encoded(rewritten(body, conv, outcome))
        target = traced(anthropic_target(services, request.headers, policies, policy), ex)
        ex.upstream_started = time.perf_counter()
        async with cancel_on_disconnect(request):
            upstream = await services.upstream.send(
                "POST", target.url, target.headers, payload, target.timeouts, ex.stream
            )
            ex.answered = 200 <= upstream.status < 300
            if ex.stream and upstream.status == 200 and "event-stream" in upstream.content_type:
                events = relay_stream(services, ex, upstream, tokenizer, MessagesTap(), error_event)
                return responses.streamed(200, upstream.headers, events, ex.context_headers())
            answer = await upstream.read()
        ex.upstream_ended = time.perf_counter()
    except Exception as exc:  # refused, gone, or a bug: a usage row, in Anthropic's shape
        return as_anthropic(failed(services, ex, exc), ex)
    response = finish_plain(
        services, ex, upstream, answer, tokenizer, text_of=message_text, usage_of=anthropic_usage
    )
    response.keep = (raw, body, payload)  # freed once the answer is out
    return response


def rewritten(body: dict[str, Any], conv: Converted, outcome: PlanOutcome) -> dict[str, Any]:
    return to_messages(body, conv, outcome.body["messages"])


async def count_message_tokens(request: Request) -> Response:
    """`POST /v1/messages/count_tokens`, answered locally: `{"input_tokens": N}` by the
    proxy's own count of the body as it came (what the budget is held to). Metered like
    any request (a usage row, api "count_tokens", the count as its tokens before and
    after) but charged nothing: nothing goes upstream. A big body is read and counted in
    the heavy-plan slot, the team's turn among the others'."""
    services: Services = request.app.state.services
    ex = Exchange(services.ids.next())
    ex.api = "count_tokens"
    try:
        ex.policy = policy = resolve_policy(services.policies.current, request.headers)
        raw = await read_body(request, services.settings.max_body_bytes)
        await checked_density(services, policy.team, raw)
        body = check_messages_body(parse_model_body(raw))
        check_counts(body["messages"], "messages", len(raw))
        base = services.settings.anthropic_base(policy) or ""
        ex.model = checked_model(body)
        tokenizer = await tokenizer_for(services, ex.model, policy, base)
        if len(raw) > PLAN_INLINE_MAX_BYTES:
            tokens = await off_loop(services, policy.team, counted, tokenizer, body)
        else:
            tokens = counted(tokenizer, body)
    except Exception as exc:
        return as_anthropic(failed(services, ex, exc), ex)
    ex.figures = Figures(None, None, tokens, tokens, 0, 0, 0, 0)
    ex.finish(services, 200)
    return responses.plain(200, responses.JSON, orjson.dumps({"input_tokens": tokens}))


def counted(tokenizer: ChatTokenizer, body: dict[str, Any]) -> int:
    return tokenizer.count_request(to_chat(body).body)


def anthropic_target(
    services: Services, client: Headers, policies: PolicySet, policy: Policy
) -> SummaryTarget:
    """The policy's Anthropic upstream: the client's headers (with `anthropic-version` and
    `anthropic-beta`) minus credentials; in key mode the team's key as `x-api-key`; in open
    mode the client's own credentials, or the team's key when it sent none."""
    target = upstream_target(services, client, policies, policy, "/v1/messages")
    own = policy.upstream.anthropic
    key = services.environ.get(own.api_key_env) if own.api_key_env else None
    headers = [(k, v) for k, v in target.headers if k != "authorization"]
    if policies.open_mode and client.get("authorization"):
        headers.append(("authorization", client["authorization"]))
    if key and not (policies.open_mode and client.get("x-api-key")):
        headers = [(k, v) for k, v in headers if k != "x-api-key"]
        headers.append(("x-api-key", key))
    base = services.settings.anthropic_base(policy)
    if base is None:  # checked before the body was read (anthropic_base_of)
        raise no_anthropic_upstream(policy)
    return SummaryTarget(base.rstrip("/") + "/v1/messages", headers, target.timeouts)


def no_anthropic_upstream(policy: Policy) -> InvalidRequest:
    """The 400 of a Messages request for a team with no Anthropic upstream named."""
    return InvalidRequest(
        f"No Anthropic upstream is configured for team {policy.team!r}: set "
        "upstream.anthropic.base_url in its policy, or start the proxy with "
        "--anthropic-upstream.",
        code="no_anthropic_upstream",
    )


def as_anthropic(response: Response, ex: Exchange) -> Response:
    """The proxy's own error answer in Anthropic's shape (`{"type": "error", "error":
    {"type", "message"}}`), same status and headers. A request refused for length says
    "prompt is too long", as Anthropic does, which Claude Code acts on."""
    status = response.status_code
    if status < 400 or not response.body:
        return response
    try:
        error = orjson.loads(response.body)["error"]
        message, code = str(error["message"]), error.get("code")
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return response
    figures = ex.figures
    if code == "context_length_exceeded" and figures is not None and figures.budget:
        too_long = f"{figures.tokens_before} tokens > {figures.budget} maximum"
        message = f"prompt is too long: {too_long}. {message}"
    headers = [(k, v) for k, v in response.raw_headers if k != b"content-length"]
    return responses.plain(status, headers, error_json(status, message))
