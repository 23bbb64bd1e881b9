"""POST /v1/context/plan: the same pipeline as a chat or Responses request, answered with
the plan (the rewritten request and its report) instead of forwarded."""

from __future__ import annotations

from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from proxy import anthropic
from proxy.errors import ProxyError
from proxy.items import Converted, is_responses_body, to_chat
from proxy.planner import PlanOutcome, Refused
from proxy.recall import with_tool
from proxy.server.core import responses
from proxy.server.core.services import Services
from proxy.server.dialects.responses import note_previous, report_json, rewritten
from proxy.server.pipeline.auth import require_admin, resolve_policy
from proxy.server.pipeline.body_limits import INLINE_MAX_ITEMS, check_counts
from proxy.server.pipeline.chat_guards import checked_model, internal_error
from proxy.server.pipeline.exchange import Exchange
from proxy.server.pipeline.plan_step import (
    PLAN_INLINE_MAX_BYTES,
    off_loop,
    parsed_body,
    plan,
    plan_in_thread,
    tag_marks,
    tokenizer_for,
)
from proxy.server.pipeline.recall_step import recall_declared, recall_reserve
from proxy.server.pipeline.request_body import (
    check_chat_body,
    check_messages_body,
    check_responses_body,
    encoded,
    parse_model_body,
    read_body,
)


async def context_plan(request: Request) -> Response:
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
        body = await parsed_body(services, policy.team, raw, parse_model_body)
        conv: Converted | anthropic.Converted | None = None
        if anthropic.is_messages_body(body):
            check_counts(check_messages_body(body)["messages"], "messages", len(raw))
            conv = anthropic.to_chat(body)
            chat = conv.body
        elif is_responses_body(body):
            entries = check_counts(check_responses_body(body).get("input"), "input", len(raw))
            big = len(raw) > PLAN_INLINE_MAX_BYTES or entries > INLINE_MAX_ITEMS
            conv = await off_loop(services, policy.team, to_chat, body) if big else to_chat(body)
            chat = conv.body
        else:
            chat = check_chat_body(body)
            check_counts(chat["messages"], "messages", len(raw))
        ex.model = checked_model(body)
        settings = services.settings
        upstream = settings.openai_base(policy)
        if isinstance(conv, anthropic.Converted):
            upstream = settings.anthropic_base(policy) or ""
        tokenizer = await tokenizer_for(services, ex.model, policy, upstream)
        cached = await services.summaries.lookup(policy, chat)
        tags = tag_marks(raw)
        api = "messages" if isinstance(conv, anthropic.Converted) else "chat"
        api = "responses" if isinstance(conv, Converted) else api
        reserve = partial(recall_reserve, services, policy, api, body, chat, tokenizer)
        ex.outcome = outcome = await plan(
            services, policy, chat, tokenizer, len(raw), cached, ex.request_id,
            fail_open=False, tags=tags, reserve=reserve,
        )  # fmt: skip
        if recall_declared(outcome):  # the request shown is the one forwarded: with the tool
            body = with_tool(body, api)
            if conv is None:
                outcome.body = with_tool(outcome.body, api)
        if plan_in_thread(chat, tokenizer, len(raw), tags):  # a big plan: a big report too
            answer = await off_loop(services, policy.team, plan_answer, outcome, body, conv)
        else:
            answer = plan_answer(outcome, body, conv)
    except ProxyError as exc:
        if isinstance(exc, Refused):
            ex.outcome = exc.outcome
        return responses.error(exc, ex.context_headers())
    except Exception as exc:  # a bug, not the client's input (plan() sorts those out)
        return responses.error(internal_error(exc, ex.request_id), ex.context_headers())
    response = responses.plain(200, responses.JSON, answer, ex.context_headers())
    response.keep = (raw, body, outcome)  # freed once the answer is out
    return response


def plan_answer(
    outcome: PlanOutcome,
    body: dict[str, Any] | None = None,
    conv: Converted | anthropic.Converted | None = None,
) -> bytes:
    """The plan endpoint's body: the rewritten request (a Responses or Messages body for
    one of those) and its report."""
    if conv is None or body is None:
        return encoded({"request": outcome.body, "report": outcome.report.to_json()})
    if isinstance(conv, anthropic.Converted):
        written = anthropic.to_messages(body, conv, outcome.body["messages"])
        return encoded({"request": written, "report": outcome.report.to_json()})
    note_previous(body, outcome)
    answer = {"request": rewritten(body, conv, outcome), "report": report_json(outcome, body)}
    return encoded(answer)
