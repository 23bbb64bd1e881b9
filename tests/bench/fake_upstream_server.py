"""Benchmark step 0: a fast fake OpenAI upstream, run as its own process.

Run: /work/venv/bin/python tests/bench/fake_upstream_server.py --port 9100 [--delay-ms 0]

A raw asyncio protocol on uvloop with httptools' parser and no framework, so that the
direct baseline measures the load generator and the network stack, not a web framework.
`POST .../chat/completions` answers a plain chat completion with usage, or, for
`"stream": true`, an SSE stream (chunked) of a few word chunks, the final chunk, a usage
chunk when `stream_options.include_usage` is set (as OpenAI does), and `data: [DONE]`.
`GET /healthz` and `GET /v1/models` answer small JSON; anything else is a 404.
Keep-alive is honoured; one line `ready <port>` is printed once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, cast

import httptools
import orjson
import uvloop

WORDS = ["Hello", "from", "the", "fast", "fake", "upstream."]
USAGE = {"prompt_tokens": 11, "completion_tokens": len(WORDS), "total_tokens": 11 + len(WORDS)}


def plain_answer(model: str) -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": " ".join(WORDS)},
                }
            ],
            "usage": USAGE,
        }
    )


def sse_events(model: str, include_usage: bool) -> list[bytes]:
    base: dict[str, Any] = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
    }
    events = []
    for i, word in enumerate(WORDS):
        delta = {"content": (" " if i else "") + word}
        events.append({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if include_usage:
        events.append({**base, "choices": [], "usage": USAGE})
    out = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events]
    return [*out, b"data: [DONE]\n\n"]


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Answers:
    """Responses are built once per (model, kind) and reused: the fake must cost ~nothing."""

    def __init__(self) -> None:
        self.cache: dict[tuple[str, str], bytes] = {}

    def get(self, model: str, kind: str) -> bytes:
        key = (model, kind)
        found = self.cache.get(key)
        if found is None:
            found = self.cache[key] = self.build(model, kind)
        return found

    @staticmethod
    def build(model: str, kind: str) -> bytes:
        if kind == "plain":
            body = plain_answer(model)
            head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            return head + b"content-length: %d\r\n\r\n" % len(body) + body
        events = sse_events(model, include_usage=kind == "stream_usage")
        head = (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        return head + b"".join(chunk(e) for e in events) + b"0\r\n\r\n"


def simple(status: bytes, body: bytes) -> bytes:
    return (
        b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(body) + body
    )


HEALTH = simple(b"200 OK", b'{"status":"ok"}')
MODELS = simple(b"200 OK", b'{"object":"list","data":[{"id":"gpt-4o","object":"model"}]}')
NOT_FOUND = simple(b"404 Not Found", b'{"error":{"message":"not found","type":"not_found"}}')
BAD = simple(b"400 Bad Request", b'{"error":{"message":"bad json","type":"invalid_request"}}')


class Connection(asyncio.Protocol):
    """One keep-alive connection: httptools feeds the callbacks, answers go out whole."""

    def __init__(self, answers: Answers, delay_s: float) -> None:
        self.answers = answers
        self.delay_s = delay_s
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.close()

    def on_message_begin(self) -> None:
        self.url, self.body = b"", []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        answer = self.route(self.parser.get_method(), self.url.split(b"?", 1)[0])
        if self.delay_s:
            asyncio.get_running_loop().call_later(self.delay_s, self.send, answer)
        else:
            self.send(answer)

    def send(self, answer: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(answer)

    def route(self, method: bytes, path: bytes) -> bytes:
        if method == b"POST" and path.endswith(b"/chat/completions"):
            try:
                body = orjson.loads(b"".join(self.body))
            except orjson.JSONDecodeError:
                return BAD
            model = str(body.get("model", "gpt-4o"))
            if body.get("stream") is not True:
                return self.answers.get(model, "plain")
            options = body.get("stream_options")
            usage = isinstance(options, dict) and options.get("include_usage") is True
            return self.answers.get(model, "stream_usage" if usage else "stream")
        if path in (b"/healthz", b"/health"):
            return HEALTH
        if path.endswith(b"/models"):
            return MODELS
        return NOT_FOUND

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(host: str, port: int, delay_s: float) -> None:
    answers = Answers()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Connection(answers, delay_s), host, port, backlog=1024, reuse_address=True
    )
    print(f"ready {port}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--delay-ms", type=float, default=0.0, help="wait before answering")
    args = parser.parse_args()
    try:
        uvloop.run(serve(args.host, args.port, args.delay_ms / 1000))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
