"""A fake OpenAI upstream: a small ASGI app that records requests and answers on demand."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests import fake_agent_model, fake_messages, fake_recall, fake_responses, fake_window

TEXT_READ_WAIT_S = 10.0


@dataclass
class Recorded:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class FakeUpstream:
    """Behaviour is chosen per request by `mode` (or the `x-fake-mode` request header)."""

    mode: str = "ok"
    requests: list[Recorded] = field(default_factory=list)
    reply_text: str = "Hello from the fake upstream."
    tool_arguments: str = '{"city": "Paris"}'  # what the Responses endpoint calls a tool with
    delay_s: float = 0.0
    agent_steps: int = 12  # the "agent" mode's tool-calling steps before its final answer
    status: int = 200
    error_body: bytes = (
        b'{"error": {"message": "rate limited", "type": "rate_limit", "code": "rate_limit"}}'
    )

    # Summary calls (the proxy's own, recognized by `summary_marker` in their prompt) are
    # answered on their own terms, whatever `mode` says: held until `summary_gate` is set,
    # then `summary_status` (200: `summary_reply` and a usage object).
    summary_marker: str = "Summarize the conversation excerpt"
    summary_reply: str = "SUMMARY-FROM-FAKE"
    summary_status: int = 200
    summary_gate: threading.Event = field(default_factory=threading.Event)
    summary_active: int = 0
    summary_peak: int = 0  # most summary calls held at once
    prompt_cache: fake_messages.PromptCache = field(default_factory=fake_messages.PromptCache)
    # Set by a test once its client has read a recall stream's text: the stream's calls
    # wait for it, at most TEXT_READ_WAIT_S (fake_recall.chat_chunks); None: they do not.
    # `text_read_in_time`: whether it was set before that (a proxy that held the text back
    # until the call was whole would leave it unset).
    text_read: threading.Event | None = None
    text_read_in_time: bool | None = None
    later_delay_s: float = 0.0  # how long the proxy's recall rounds (continuations) wait
    # A context window counted the fake's own way (fake_window.py): a request over it is
    # refused as the API refuses it, and an answer's prompt tokens are that count.
    window: int | None = None
    window_wording: str = "prompt"  # Messages: "prompt is too long", or "sum"; chat: "vllm"
    refused: int = 0  # requests refused for length
    refusals: list[bytes] = field(default_factory=list)  # what each of them was answered

    def __post_init__(self) -> None:
        self.summary_gate.set()

    def reset(self) -> None:
        self.mode, self.requests, self.delay_s, self.status = "ok", [], 0.0, 200
        self.agent_steps = 12
        self.reply_text = "Hello from the fake upstream."
        self.tool_arguments = '{"city": "Paris"}'
        self.summary_reply, self.summary_status = "SUMMARY-FROM-FAKE", 200
        self.summary_active = self.summary_peak = 0
        self.summary_gate.set()
        self.prompt_cache = fake_messages.PromptCache()
        self.text_read, self.text_read_in_time = None, None
        self.later_delay_s = 0.0
        self.window, self.window_wording, self.refused = None, "prompt", 0
        self.refusals = []

    async def _wait_text_read(self) -> None:
        event = self.text_read
        if event is not None:
            self.text_read_in_time = await asyncio.to_thread(event.wait, TEXT_READ_WAIT_S)

    def too_long(self, rec: Recorded, api: str) -> Response | None:
        """The API's refusal of a request over the fake's window, when it has one."""
        if self.window is None:
            return None
        refused = fake_window.refusal(api, rec.body, self.window, self.window_wording)
        if refused is None:
            return None
        self.refused += 1
        self.refusals.append(refused)
        return Response(refused, status_code=400, media_type="application/json")

    def prompt_count(self, rec: Recorded, default: int, api: str = "chat") -> int:
        return fake_window.count(rec.body, api) if self.window is not None else default

    def is_summary(self, rec: Recorded) -> bool:
        return self.summary_marker.encode() in rec.body

    @property
    def summary_requests(self) -> list[Recorded]:
        return [
            r for r in self.requests if r.path.endswith("/chat/completions") and self.is_summary(r)
        ]

    @property
    def chat_requests(self) -> list[Recorded]:
        """The chat-completion requests that are not summary calls."""
        return [
            r
            for r in self.requests
            if r.path.endswith("/chat/completions") and not self.is_summary(r)
        ]

    @property
    def responses_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/responses")]

    @property
    def last(self) -> Recorded:
        return self.requests[-1]

    async def responses(self, request: Request) -> Response:
        """The Responses API: a message, or a call of the first function tool when the
        input ends with a user message; 400 like OpenAI for a call without its output."""
        rec = await self.record(request)
        mode = rec.headers.get("x-fake-mode", self.mode)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        refused = self.too_long(rec, "responses")
        if refused is not None:
            return refused
        if mode == "error":
            return Response(self.error_body, status_code=self.status if self.status >= 400 else 429)
        if mode == "hang":
            await asyncio.sleep(3600)
        body = rec.json()
        problem = fake_responses.pairing_problem(body)
        if problem is not None:
            error = {
                "message": problem,
                "type": "invalid_request_error",
                "param": "input",
                "code": None,
            }
            return Response(
                orjson.dumps({"error": error}), status_code=400, media_type="application/json"
            )
        if self.later_delay_s and fake_recall.continuation(body, "responses"):
            await asyncio.sleep(self.later_delay_s)
        if fake_recall.recalls(body, "responses", mode):
            answer = fake_recall.responses_answer(body, mode)
            if body.get("stream"):
                events = fake_responses.events(answer, broken=False)
                return StreamingResponse(events, media_type="text/event-stream")
            return Response(orjson.dumps(answer), media_type="application/json")
        steps = self.agent_steps if mode in ("agent", "agent_recall", "agent_compacting") else 0
        # A server that compacts (Codex's remote compaction): what it reads past its summary.
        read = fake_responses.since_compaction(body) if mode == "agent_compacting" else None
        answer = fake_responses.response(
            body, self.reply_text, len(rec.body), self.tool_arguments, steps, read
        )
        if mode == "no_usage":
            answer["usage"] = None
        elif self.window is not None:
            answer["usage"]["input_tokens"] = self.prompt_count(rec, 0, "responses")
        if fake_responses.compaction_asked(body):  # server-side compaction (Codex's v2)
            answer["output"] = [fake_responses.compaction_item(rec.body)]
        if body.get("background") is True:  # queued: the answer is read later, usage unknown
            answer.update(status="queued", output=[], usage=None)
        if body.get("stream"):
            return StreamingResponse(
                fake_responses.events(
                    answer, broken=mode == "break", cut_short=mode == "cut_short"
                ),
                media_type="text/event-stream",
            )
        return Response(orjson.dumps(answer), media_type="application/json")

    async def compact(self, request: Request) -> Response:
        """OpenAI's compaction: the user messages of the input, then one compaction item
        (opaque: a digest of what it replaces), and the pass's usage."""
        rec = await self.record(request)
        body = rec.json()
        items = body.get("input") if isinstance(body.get("input"), list) else []
        users = [i for i in items if isinstance(i, dict) and i.get("role") == "user"]
        digest = hashlib.sha256(rec.body).hexdigest()[:16]
        compaction = {
            "type": "compaction",
            "id": f"cmp_{digest}",
            "encrypted_content": f"enc:{digest}",
        }
        prompt = len(rec.body) // 4
        answer = {
            "id": f"resp_cmp_{digest}", "object": "response.compaction", "created_at": 1,
            "output": [*users, compaction],
            "usage": {"input_tokens": prompt, "output_tokens": 40, "total_tokens": prompt + 40,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
        }  # fmt: skip
        return Response(orjson.dumps(answer), media_type="application/json")

    async def messages(self, request: Request) -> Response:
        """Anthropic's Messages API: its 400 for a body its rules refuse (in its error
        shape), else a Message (a tool loop in "agent" mode), plain or streamed."""
        rec = await self.record(request)
        mode = rec.headers.get("x-fake-mode", self.mode)
        refused = self.too_long(rec, "messages")
        if refused is not None:
            return refused
        if mode == "error":
            error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
            return Response(orjson.dumps(error), status_code=529, media_type="application/json")
        body = rec.json()
        refused = fake_messages.problem(body)
        if refused is not None:
            error = {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": refused},
            }
            return Response(orjson.dumps(error), status_code=400, media_type="application/json")
        if self.later_delay_s and fake_recall.continuation(body, "messages"):
            await asyncio.sleep(self.later_delay_s)
        if fake_recall.recalls(body, "messages", mode):
            answer = fake_recall.messages_answer(body, mode)
            if body.get("stream"):
                events = fake_messages.events(answer)
                return StreamingResponse(events, media_type="text/event-stream")
            return Response(orjson.dumps(answer), media_type="application/json")
        answer = fake_messages.reply(
            body, self.agent_steps if mode in ("agent", "agent_recall") else 0, self.reply_text
        )
        if mode == "cache":  # usage as Anthropic's prompt cache would bill the body
            answer["usage"] = self.prompt_cache.usage(body)
        answer["usage"]["input_tokens"] += fake_messages.fetched_tokens(body)
        if self.window is not None:
            answer["usage"]["input_tokens"] = self.prompt_count(rec, 0, "messages")
        told = rec.headers.get("x-fake-input-tokens")
        if told is not None:  # an upstream whose reports are off, either way
            answer["usage"] = {**answer["usage"], "input_tokens": int(told),
                               "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}  # fmt: skip
        if body.get("stream"):
            return StreamingResponse(
                fake_messages.events(answer, broken=mode == "break"), media_type="text/event-stream"
            )
        return Response(orjson.dumps(answer), media_type="application/json")

    @property
    def messages_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path == "/v1/messages"]

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/responses", self.responses, methods=["POST"]),
                Route("/v1/responses/compact", self.compact, methods=["POST"]),
                Route("/v1/messages", self.messages, methods=["POST"]),
                Route(
                    "/v1/{rest:path}", self.other, methods=["GET", "POST", "PUT", "DELETE", "PATCH"]
                ),
            ]
        )

    async def record(self, request: Request) -> Recorded:
        rec = Recorded(
            request.method,
            request.url.path,
            request.url.query,
            dict(request.headers),
            await request.body(),
        )
        self.requests.append(rec)
        return rec

    async def other(self, request: Request) -> Response:
        rec = await self.record(request)
        if rec.path == "/v1/models":
            return Response(
                orjson.dumps({"object": "list", "data": [{"id": "gpt-4o", "object": "model"}]}),
                media_type="application/json",
                headers={"x-upstream": "yes"},
            )
        if rec.path == "/v1/embeddings" and rec.body.startswith(b"{"):  # else echoed
            prompt = len(rec.body) // 4
            return Response(
                orjson.dumps({
                    "object": "list",
                    "data": [{"object": "embedding", "index": 0, "embedding": [0.5] * 8}],
                    "model": "text-embedding-3-small",
                    "usage": {"prompt_tokens": prompt, "total_tokens": prompt},
                }),
                media_type="application/json",
            )  # fmt: skip
        if rec.path == "/v1/completions" and rec.body.startswith(b"{"):  # billed at the most
            asked = orjson.loads(rec.body)
            prompt = len(rec.body) // 4
            prompts = asked["prompt"] if isinstance(asked.get("prompt"), list) else [""]
            answers = max(asked.get("n") or 1, asked.get("best_of") or 1) * len(prompts)
            completion = answers * (asked.get("max_tokens") or 16)
            return Response(
                orjson.dumps({
                    "object": "text_completion", "model": asked.get("model"),
                    "choices": [{"index": i, "text": "ok", "finish_reason": "length"}
                                for i in range(answers)],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                              "total_tokens": prompt + completion},
                }),
                media_type="application/json",
            )  # fmt: skip
        if rec.path == "/v1/stream-out":

            async def parts() -> Any:
                for i in range(5):
                    yield f"part{i};".encode()
                    await asyncio.sleep(0.01)

            return StreamingResponse(parts(), media_type="text/plain")
        echo = {
            "method": rec.method,
            "path": rec.path,
            "query": rec.query,
            "size": len(rec.body),
            "authorization": rec.headers.get("authorization"),
        }
        return Response(orjson.dumps(echo), media_type="application/json")

    async def summary(self, rec: Recorded) -> Response:
        self.summary_active += 1
        self.summary_peak = max(self.summary_peak, self.summary_active)
        try:
            # Bounded, so a test that forgets to open the gate cannot hang the server.
            await asyncio.to_thread(self.summary_gate.wait, 30)
        finally:
            self.summary_active -= 1
        if self.summary_status != 200:
            return Response(
                self.error_body, status_code=self.summary_status, media_type="application/json"
            )
        answer = {
            "id": "chatcmpl-fake-summary",
            "object": "chat.completion",
            "model": rec.json().get("model"),
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": self.summary_reply},
                }
            ],
            "usage": {"prompt_tokens": 40, "completion_tokens": 10, "total_tokens": 50},
        }
        return Response(orjson.dumps(answer), media_type="application/json")

    async def chat(self, request: Request) -> Response:
        rec = await self.record(request)
        if self.is_summary(rec):
            return await self.summary(rec)
        mode = rec.headers.get("x-fake-mode", self.mode)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        refused = self.too_long(rec, "chat")
        if refused is not None:
            return refused
        if mode == "error":
            return Response(
                self.error_body,
                status_code=self.status if self.status >= 400 else 429,
                media_type="application/json",
                headers={"retry-after": "7"},
            )
        if mode == "invalid_json":
            return Response(b"{not json", media_type="application/json")
        if mode == "html":
            return Response(
                b"<html><body>Bad gateway</body></html>", status_code=502, media_type="text/html"
            )
        if mode == "hang":
            await asyncio.sleep(3600)
        body = rec.json()
        if self.later_delay_s and fake_recall.continuation(body, "chat"):
            await asyncio.sleep(self.later_delay_s)
        if fake_recall.recalls(body, "chat", mode):
            answer = fake_recall.chat_answer(body, mode)
            if mode.startswith("recall_storm"):  # usage sized by what was sent
                answer["usage"] = fake_recall.sized(len(rec.body), answer, body.get("max_tokens"))
            if body.get("stream"):
                gate = self._wait_text_read if self.text_read is not None else None
                chunks = fake_recall.chat_chunks(body, answer, gate)
                return StreamingResponse(chunks, media_type="text/event-stream")
            return Response(orjson.dumps(answer), media_type="application/json")
        if mode in ("agent", "agent_recall"):  # a scripted tool loop (fake_agent_model.py)
            message = fake_agent_model.next_message(body, self.agent_steps)
            if body.get("stream"):
                events = fake_agent_model.chunks(body, message)
                return StreamingResponse(events, media_type="text/event-stream")
            answer = fake_agent_model.completion(body, message)
            return Response(orjson.dumps(answer), media_type="application/json")
        prompt = self.prompt_count(rec, 11)
        if body.get("stream"):
            return self.stream(body, broken=mode == "break", prompt=prompt)
        usage = (
            None
            if mode == "no_usage"
            else {"prompt_tokens": prompt, "completion_tokens": 7, "total_tokens": prompt + 7}
        )
        if mode == "sized_usage":  # a token per word of the request, as a tokenizer would
            prompt = len(rec.body.split())
            # an answer of the length the client allows (a model that runs on), or 7
            limit = body.get("max_tokens") or int(rec.headers.get("x-fake-answer-tokens", "7"))
            limit *= body.get("n") or 1  # each of the n answers runs on
            usage = {"prompt_tokens": prompt, "completion_tokens": limit,
                     "total_tokens": prompt + limit}  # fmt: skip
        elif mode == "negative_usage":
            usage = {"prompt_tokens": -1_000_000_000, "completion_tokens": 7, "total_tokens": 0}
        answer: dict[str, Any] = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1,
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": self.reply_text},
                }
            ],
        }
        if usage:
            answer["usage"] = usage
        return Response(orjson.dumps(answer), media_type="application/json")

    def stream(self, body: dict[str, Any], broken: bool, prompt: int = 11) -> StreamingResponse:
        include_usage = (body.get("stream_options") or {}).get("include_usage") is True
        words = self.reply_text.split(" ")

        async def events() -> Any:
            base = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": body.get("model"),
            }
            for i, word in enumerate(words):
                chunk = dict(
                    base,
                    choices=[
                        {
                            "index": 0,
                            "delta": {"content": (" " if i else "") + word},
                            "finish_reason": None,
                        }
                    ],
                )
                if include_usage:
                    chunk["usage"] = None
                yield b"data: " + orjson.dumps(chunk) + b"\n\n"
                await asyncio.sleep(0.005)
                if broken and i == 1:
                    raise ConnectionResetError("fake upstream breaks mid-stream")
            final = dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}])
            if include_usage:
                final["usage"] = None
            yield b"data: " + orjson.dumps(final) + b"\n\n"
            if include_usage:
                yield (
                    b"data: "
                    + orjson.dumps(
                        dict(
                            base,
                            choices=[],
                            usage={
                                "prompt_tokens": prompt,
                                "completion_tokens": len(words),
                                "total_tokens": prompt + len(words),
                            },
                        )
                    )
                    + b"\n\n"
                )
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")
