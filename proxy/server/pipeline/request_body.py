"""Reading and validating a client's body: size limit, read timeout, JSON, required fields."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.types import Message

from proxy.errors import BodyTimeout, BodyTooLarge, InvalidRequest
from proxy.server.pipeline.ready_now import ready_now

BODY_READ_TIMEOUT_S = 60.0


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The whole body, refusing more than `max_bytes` as early as possible."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise BodyTooLarge(too_large(max_bytes))
    got, rest = ready_now(request.receive())
    if got is not None and got["type"] == "http.request" and not got.get("more_body"):
        # The whole body came with the head (a small request): nothing to wait for, so
        # no deadline to arm.
        body: bytes = got.get("body", b"")
        if len(body) > max_bytes:
            raise BodyTooLarge(too_large(max_bytes))
        return body
    return await _read_rest(request, max_bytes, got, rest)


async def _read_rest(
    request: Request, max_bytes: int, got: Message | None, rest: Awaitable[Message]
) -> bytes:
    """The body from the first message on (`got`, or `rest` to await), within the deadline."""
    parts: list[bytes] = []
    size = 0
    # A plain timer rather than asyncio.timeout(): the same deadline without a context
    # manager to enter, reschedule and leave.
    task = asyncio.current_task()
    assert task is not None
    expired: list[bool] = []
    timer = asyncio.get_running_loop().call_later(BODY_READ_TIMEOUT_S, _expire, task, expired)
    try:
        while True:
            message = got if got is not None else await rest
            kind = message["type"]
            if kind == "http.disconnect":
                raise InvalidRequest("The client disconnected before sending its body.")
            if kind == "http.request":
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > max_bytes:
                    raise BodyTooLarge(too_large(max_bytes))
                parts.append(chunk)
                if not message.get("more_body"):
                    break
            got, rest = None, request.receive()
    except asyncio.CancelledError:
        if not expired:
            raise
        task.uncancel()
        raise BodyTimeout("The request body was not received in time.") from None
    finally:
        timer.cancel()
    return b"".join(parts)


def _expire(task: asyncio.Task[object], expired: list[bool]) -> None:
    expired.append(True)
    task.cancel()


def too_large(max_bytes: int) -> str:
    return f"The request body is larger than the proxy's limit of {max_bytes // (1024 * 1024)} MiB."


def parse_model_body(raw: bytes) -> dict[str, Any]:
    """A JSON object with a string `model`: what every planned API needs."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc.msg}.") from None
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("you must provide a model parameter", param="model")
    return body


def encoded(value: Any) -> bytes:
    """`value` as JSON bytes; a 400 when it cannot be written (orjson writes at most 254
    levels of nesting, reads 1,024: a body between the two can be read, not rewritten)."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        raise InvalidRequest(
            f"The request cannot be written back as JSON after trimming ({exc}): "
            "the proxy writes at most 254 levels of nesting.",
            code="nested_too_deep",
        ) from None


def parse_chat_body(raw: bytes) -> dict[str, Any]:
    """A chat-completion body with a string `model` and a list of object `messages`."""
    return check_chat_body(parse_model_body(raw))


def check_chat_body(body: dict[str, Any]) -> dict[str, Any]:
    """`body` (a JSON object with a model) if it is a chat-completion body, else a 400."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array", param="messages")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidRequest(
                f"messages[{index}] must be an object with a string 'role'",
                param=f"messages[{index}]",
            )
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            raise InvalidRequest(f"'{key}' must be a non-negative integer", param=key)
    _check_stream(body)
    return body


def parse_messages_body(raw: bytes) -> dict[str, Any]:
    return check_messages_body(parse_model_body(raw))


def check_messages_body(body: dict[str, Any]) -> dict[str, Any]:
    """`body` (a JSON object with a model) if it is shaped as a Messages API body, else a
    400: `messages` objects with a string `role` and a string or array `content`, `tools`
    an array of objects, `system` a string or an array of objects."""
    check_chat_body(body)
    for index, message in enumerate(body["messages"]):
        content = message.get("content")
        blocks = isinstance(content, list) and all(isinstance(b, dict) for b in content)
        if not isinstance(content, str) and not blocks:
            raise InvalidRequest(
                f"messages[{index}].content must be a string or an array of content blocks",
                param=f"messages[{index}].content",
            )
    for key, text_allowed in (("tools", False), ("system", True)):
        value = body.get(key)
        if value is None or (text_allowed and isinstance(value, str)):
            continue
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            shape = "a string or an array of objects" if text_allowed else "an array of objects"
            raise InvalidRequest(f"'{key}' must be {shape}", param=key)
    return body


def check_responses_body(body: dict[str, Any]) -> dict[str, Any]:
    """`body` (a JSON object with a model) if it is a Responses API body, else a 400:
    `input` a string or an array of objects."""
    given = body.get("input")
    if isinstance(given, list):
        for index, item in enumerate(given):
            if not isinstance(item, dict):
                raise InvalidRequest(f"input[{index}] must be an object", param=f"input[{index}]")
    elif given is not None and not isinstance(given, str):
        raise InvalidRequest("'input' must be a string or an array of items", param="input")
    value = body.get("max_output_tokens")
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise InvalidRequest(
            "'max_output_tokens' must be a non-negative integer", param="max_output_tokens"
        )
    _check_stream(body)
    return body


def _check_stream(body: dict[str, Any]) -> None:
    if "stream" in body and not isinstance(body["stream"], bool | None):
        raise InvalidRequest("'stream' must be a boolean", param="stream")
