"""Answer step, shared by chat completions and the Responses API: a plain answer read for
its usage, or a stream relayed event by event; either way the usage row."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

import orjson

from proxy.errors import ProxyError, UpstreamUnreachable
from proxy.server.core import responses
from proxy.server.core.services import Services
from proxy.server.pipeline.estimates import estimate_completion
from proxy.server.pipeline.exchange import Exchange
from proxy.types import Tokenizer
from proxy.upstream import StreamTap, UpstreamBroke, UpstreamResponse


def chat_text_of(parsed: dict[str, Any]) -> str:
    parts: list[str] = []
    for choice in parsed.get("choices") or ():
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            parts.append(message["content"])
    return "".join(parts)


def finish_plain(
    services: Services,
    ex: Exchange,
    upstream: UpstreamResponse,
    answer: bytes,
    tokenizer: Tokenizer,
    text_of: Callable[[dict[str, Any]], str] = chat_text_of,
    usage_of: Callable[[Any], Any] = lambda usage: usage,
) -> responses.Plain:
    """The upstream's answer as it came; its usage (chat's or the Responses API's names, or
    `usage_of` them), or an estimate of the generated text (`text_of`) when it has none,
    for the usage row."""
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
            headers = ex.context_headers()
            ex.finish(services, exc.status, exc.code)
            return responses.error(exc, headers)
        if isinstance(parsed, dict):
            ex.take_usage(usage_of(parsed.get("usage")))
            if not ex.usage_from_upstream:
                ex.estimated_completion = estimate_completion(tokenizer, text_of(parsed))
    else:
        error = f"upstream_{status}"
    headers = ex.context_headers()
    ex.finish(services, status, error)
    return responses.plain(status, upstream.headers, answer, headers)


async def relay_stream(
    services: Services,
    ex: Exchange,
    upstream: UpstreamResponse,
    tokenizer: Tokenizer,
    tap: StreamTap,
    error_event: Callable[[str, str, str], bytes],
    source: AsyncGenerator[bytes] | None = None,
) -> AsyncGenerator[bytes]:
    """Pass events on as they arrive (the upstream's, or what `source` makes of them: the
    rounds of a recall); on a break, or a later round that could not go, one error event
    and a clean end."""
    status, error = 200, None
    try:
        async for chunk in source if source is not None else upstream.chunks():
            out = tap.feed(chunk)
            if out:
                yield out
        rest = tap.flush()
        if rest:
            yield rest
        if not tap.finished:  # ended cleanly but early: the client must not take it as whole
            status, error = 502, "upstream_stream_incomplete"
            message = "The upstream stream ended before its final event."
            yield error_event(message, "upstream_error", error)
    except UpstreamBroke as exc:
        status = 504 if exc.timed_out else 502
        error = "upstream_timeout" if exc.timed_out else "upstream_stream_broken"
        yield error_event(f"The upstream stream ended abnormally: {exc}", "upstream_error", error)
    except ProxyError as exc:  # a later round refused (a limit) or failed upstream
        status, error = exc.status, exc.code or exc.type
        yield error_event(exc.message, exc.type, error)
    except (asyncio.CancelledError, GeneratorExit) as exc:  # the client left, or the server stops
        status, error = 499, "client_disconnected"
        if services.stopping:  # the grace period is over: the server cut it, not the client
            status, error = 503, "server_shutdown"
        if tap.finished:  # it left after the final event: it had the whole answer
            status, error = 200, None
        elif error == "server_shutdown" and isinstance(exc, asyncio.CancelledError):
            yield error_event("The server is shutting down; send the request again.",
                              "server_error", "server_shutdown")  # fmt: skip
        raise
    finally:
        upstream.close()
        if source is not None:  # its rounds closed, and what they used noted, before the row
            await source.aclose()
        ex.upstream_ended = time.perf_counter()
        ex.take_usage(tap.usage)
        if not ex.usage_from_upstream:
            text = tap.text()
            beyond = tap.estimated_chars_beyond(text)  # a long stream keeps only its start
            ex.estimated_completion = estimate_completion(tokenizer, text, beyond)
        ex.finish(services, status, error)
