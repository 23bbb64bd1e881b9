"""Anthropic's Messages API (POST /v1/messages) as a dialect of the pipeline: its blocks
read into neutral chat messages for planning and written back as blocks; its own upstream
(refused when none is named) and credentials; errors in Anthropic's shape."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.datastructures import Headers
from starlette.responses import Response

from proxy.anthropic import Converted, anthropic_usage, error_json, message_text, to_chat
from proxy.anthropic.answer import error_event
from proxy.anthropic.events import MessagesTap
from proxy.anthropic.write import to_messages
from proxy.errors import InvalidRequest
from proxy.planner import PlanOutcome
from proxy.policy import Policy, PolicySet
from proxy.server.core import responses
from proxy.server.core.services import Services
from proxy.server.pipeline.dialect import DialectBase, Flight, written_back
from proxy.server.pipeline.exchange import Exchange
from proxy.server.pipeline.forward_step import upstream_target
from proxy.server.pipeline.plan_step import PLAN_INLINE_MAX_BYTES
from proxy.server.pipeline.request_body import check_messages_body, encoded, parse_model_body
from proxy.summaries import SummaryTarget
from proxy.upstream import StreamTap


class Messages(DialectBase):
    """Blocks read into neutral messages and written back; its own upstream and
    credentials; errors in Anthropic's shape; no proxy summaries."""

    api = "messages"
    summaries = False
    reader = staticmethod(to_chat)

    def text_of(self, answer: dict[str, Any]) -> str:
        return message_text(answer)

    def usage_of(self, usage: Any) -> Any:
        return anthropic_usage(usage)

    def error_event(self, message: str, kind: str, code: str) -> bytes:
        return error_event(message, kind, code)

    def upstream_base(self, services: Services, policy: Policy) -> str:
        base = services.settings.anthropic_base(policy)
        if base is None:  # refused before a byte of the body is read
            raise no_anthropic_upstream(policy)
        return base

    def parse(self, raw: bytes) -> dict[str, Any]:
        return check_messages_body(parse_model_body(raw))

    def is_big(self, flight: Flight) -> bool:
        return len(flight.raw) > PLAN_INLINE_MAX_BYTES

    async def payload(self, services: Services, ex: Exchange, flight: Flight) -> bytes:
        conv, outcome = flight.neutral, flight.outcome
        assert isinstance(conv, Converted) and outcome is not None
        body = flight.declared(self.api)
        return await written_back(services, ex, flight, written, body, conv, outcome)

    def target(
        self, services: Services, headers: Headers, policies: PolicySet, policy: Policy
    ) -> SummaryTarget:
        return anthropic_target(services, headers, policies, policy)

    def tap(self, flight: Flight) -> StreamTap:
        return MessagesTap()

    def answer_failure(self, response: Response, ex: Exchange) -> Response:
        return as_anthropic(response, ex)


MESSAGES = Messages()


def rewritten(body: dict[str, Any], conv: Converted, outcome: PlanOutcome) -> dict[str, Any]:
    return to_messages(body, conv, outcome.body["messages"])


def written(body: dict[str, Any], conv: Converted, outcome: PlanOutcome) -> bytes:
    return encoded(rewritten(body, conv, outcome))


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
