"""Chat completions (POST /v1/chat/completions) as a dialect of the pipeline: the body is
already the planner's neutral chat, and a stream is asked for its usage chunk."""

from __future__ import annotations

from typing import Any, NamedTuple

from starlette.datastructures import Headers

from proxy.planner import PlanOutcome
from proxy.policy import Policy, PolicySet
from proxy.recall import with_tool
from proxy.server.core.services import Services
from proxy.server.pipeline.answer_step import chat_text_of
from proxy.server.pipeline.dialect import DialectBase, Flight
from proxy.server.pipeline.exchange import Exchange
from proxy.server.pipeline.forward_step import upstream_target
from proxy.server.pipeline.request_body import encoded, parse_chat_body
from proxy.summaries import SummaryTarget
from proxy.upstream import StreamTap, error_event


class ChatBody(NamedTuple):
    """A chat body as the planner reads it: itself."""

    body: dict[str, Any]
    tagged: bool = False


class Chat(DialectBase):
    """The body is already neutral; the payload asks a stream for its usage chunk."""

    api = "chat"

    def text_of(self, answer: dict[str, Any]) -> str:
        return chat_text_of(answer)

    def error_event(self, message: str, kind: str, code: str) -> bytes:
        return error_event(message, kind, code)

    def parse(self, raw: bytes) -> dict[str, Any]:
        return parse_chat_body(raw)

    def is_big(self, flight: Flight) -> bool:
        return False  # nothing to convert: a big plan goes to a thread by itself

    async def to_neutral(self, services: Services, team: str, flight: Flight) -> ChatBody:
        return ChatBody(flight.body)

    async def payload(self, services: Services, ex: Exchange, flight: Flight) -> bytes:
        assert flight.outcome is not None
        if flight.recall is not None:
            flight.outcome.body = with_tool(flight.outcome.body, self.api)
        payload, flight.client_wants_usage = forwarded_payload(
            flight.raw, flight.body, flight.outcome, ex.stream
        )
        return payload

    def target(
        self, services: Services, headers: Headers, policies: PolicySet, policy: Policy
    ) -> SummaryTarget:
        return upstream_target(services, headers, policies, policy, "/chat/completions")

    def tap(self, flight: Flight) -> StreamTap:
        return StreamTap(flight.client_wants_usage)


CHAT = Chat()


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
