"""`POST /v1/messages/count_tokens`, answered by the proxy itself, beside the pipeline."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from proxy.anthropic import to_chat
from proxy.server.core import responses
from proxy.server.core.services import Services
from proxy.server.dialects.messages import as_anthropic
from proxy.server.pipeline.auth import resolve_policy
from proxy.server.pipeline.body_limits import check_counts
from proxy.server.pipeline.chat_guards import checked_model
from proxy.server.pipeline.exchange import Exchange, Figures
from proxy.server.pipeline.forward_step import failed
from proxy.server.pipeline.plan_step import (
    PLAN_INLINE_MAX_BYTES,
    off_loop,
    parsed_body,
    tokenizer_for,
)
from proxy.server.pipeline.request_body import parse_messages_body, read_body
from proxy.tokens import ChatTokenizer

SLICE_BYTES = 512 * 1024  # of a big body counted at once: ~50 ms of the slot


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
        body = await parsed_body(services, policy.team, raw, parse_messages_body)
        check_counts(body["messages"], "messages", len(raw))
        base = services.settings.anthropic_base(policy) or ""
        ex.model = checked_model(body)
        tokenizer = await tokenizer_for(services, ex.model, policy, base)
        if len(raw) > PLAN_INLINE_MAX_BYTES:
            tokens = await counted_in_slices(services, policy.team, tokenizer, body, len(raw))
        else:
            tokens = counted(tokenizer, body)
    except Exception as exc:
        return as_anthropic(failed(services, ex, exc), ex)
    ex.figures = Figures(None, None, tokens, tokens, 0, 0, 0, 0)
    ex.finish(services, 200)
    return responses.plain(200, responses.JSON, orjson.dumps({"input_tokens": tokens}))


def counted(tokenizer: ChatTokenizer, body: dict[str, Any]) -> int:
    return tokenizer.count_request(to_chat(body).body)


async def counted_in_slices(
    services: Services, team: str, tokenizer: ChatTokenizer, body: dict[str, Any], size: int
) -> int:
    """A big body's count, a slice of its messages at a time (SLICE_BYTES of the body's
    size each), each in the heavy slot on its own: another team's request waits for one
    slice at most, not the whole count (12 MB: 1.2 s in one piece)."""
    chat = (await off_loop(services, team, to_chat, body)).body
    messages = chat["messages"]
    per = max(1, len(messages) * SLICE_BYTES // max(size, 1))
    total = await off_loop(services, team, tokenizer.count_request_overhead, chat)
    for start in range(0, len(messages), per):
        total += await off_loop(
            services, team, _count_messages, tokenizer, messages[start : start + per]
        )
    return total


def _count_messages(tokenizer: ChatTokenizer, messages: list[Any]) -> int:
    return sum(tokenizer.count_message(m) for m in messages)
