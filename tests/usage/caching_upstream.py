"""A fake upstream that reports prompt-cache hits: chat completions and the Responses API,
plain and streamed, with the `cached_tokens` each request's `x-cached` header names."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.conftest import RunningProxy, serve


class CachingUpstream:
    """Answers chat completions (plain and streamed) with the `cached_tokens` the request's
    `x-cached` header names (`none`: no details at all)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/responses", self.responses, methods=["POST"]),
            ]
        )

    async def responses(self, request: Request) -> Response:
        """The Responses API's shapes: `input_tokens_details`, and when streamed the usage
        in the final `response.completed` event."""
        body = orjson.loads(await request.body())
        self.bodies.append(body)
        cached = request.headers.get("x-cached", "none")
        usage: dict[str, Any] = {"input_tokens": 1300, "output_tokens": 5, "total_tokens": 1305}
        if cached != "none":
            usage["input_tokens_details"] = {"cached_tokens": int(cached)}
        item = {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": "ok", "annotations": []}]}  # fmt: skip
        done = {"id": "resp_1", "object": "response", "status": "completed",
                "model": body["model"], "output": [item], "usage": usage}  # fmt: skip
        if not body.get("stream"):
            return Response(orjson.dumps(done), media_type="application/json")

        async def events() -> Any:
            created = dict(done, status="in_progress", output=[], usage=None)
            for kind, data in (
                ("response.created", {"response": created}),
                ("response.output_text.delta", {"item_id": "msg_1", "delta": "ok"}),
                ("response.completed", {"response": done}),
            ):
                payload = orjson.dumps({"type": kind, **data})
                yield b"event: " + kind.encode() + b"\ndata: " + payload + b"\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.bodies.append(body)
        cached = request.headers.get("x-cached", "none")
        usage: dict[str, Any] = {
            "prompt_tokens": 1500,
            "completion_tokens": 9,
            "total_tokens": 1509,
        }
        if cached != "none":
            usage["prompt_tokens_details"] = {"cached_tokens": int(cached), "audio_tokens": 0}
        base = {"id": "c", "created": 1, "model": body["model"]}
        if not body.get("stream"):
            message = {"role": "assistant", "content": "ok"}
            answer = dict(base, object="chat.completion", usage=usage,
                          choices=[{"index": 0, "finish_reason": "stop", "message": message}])  # fmt: skip
            return Response(orjson.dumps(answer), media_type="application/json")
        include = (body.get("stream_options") or {}).get("include_usage") is True

        async def events() -> Any:
            chunk = dict(base, object="chat.completion.chunk",
                         choices=[{"index": 0, "delta": {"content": "ok"}, "finish_reason": None}])  # fmt: skip
            yield b"data: " + orjson.dumps(chunk) + b"\n\n"
            if include:
                last = dict(base, object="chat.completion.chunk", choices=[], usage=usage)
                yield b"data: " + orjson.dumps(last) + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")


@pytest.fixture
def caching_upstream() -> Iterator[tuple[CachingUpstream, str]]:
    fake = CachingUpstream()
    with serve(fake.app()) as url:
        yield fake, url + "/v1"


def rows_of(proxy: RunningProxy, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 5
    while True:
        path = proxy.usage_path
        rows = [orjson.loads(x) for x in path.read_bytes().splitlines()] if path.exists() else []
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.01)
