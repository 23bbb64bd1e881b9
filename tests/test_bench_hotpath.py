"""Hot-path benchmark tools: the relay floor relays, and profile samples go to the right step."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))

from hotpath import SERVER, step_of
from profile_proxy import main_thread_lines
from relay import create_app

RAW = """\
thread (10): MainThread;<module> (relay.py:96);Runner.run (asyncio/runners.py:118) 5
thread (10): MainThread 3
thread (10): MainThread;chat_completions (proxy/handlers.py:50);read_body (proxy/request_body.py:18) 2
thread (11): usage-log-writer;Thread.run (threading.py:982);UsageLog._run (proxy/usage_writer.py:120) 7
"""


def test_main_thread_lines_keep_torn_samples_and_set_other_threads_apart(tmp_path: Path) -> None:
    raw = tmp_path / "stacks.txt"
    raw.write_text(RAW)
    stacks, others = main_thread_lines(raw)
    assert sum(n for _, n in stacks) == 10  # a sample with no Python frame is still CPU
    assert (["(no Python frame: uvloop, C)"], 3) in stacks
    assert sum(others.values()) == 7


def test_deepest_proxy_step_wins_and_server_is_the_rest() -> None:
    handler = "chat_completions (proxy/handlers.py)"
    finish = "Exchange.finish (proxy/exchange.py)"
    assert step_of([handler, finish, "QuotaBook.add (proxy/quotas.py)"]) == "finish: quota add"
    assert step_of([handler, finish]) == "finish: record, rest"
    # aiohttp inside the proxy's upstream call is that call, not the relay's step
    upstream = [handler, "Upstream.send (proxy/upstream.py)", "ClientSession._request (aiohttp)"]
    assert step_of(upstream) == "upstream call (proxy wrapper + aiohttp)"
    assert step_of(["chat (relay.py)", "ClientSession._request (aiohttp/client.py)"]) == (
        "upstream call (proxy wrapper + aiohttp)"
    )
    # the connection-limits protocol wraps uvicorn's parsing: only its timer is its own
    parse = ["LimitedProtocol.data_received (proxy/connection_limits.py)", "on_url (uvicorn)"]
    assert step_of(parse) == SERVER


async def _relay_roundtrip() -> tuple[httpx.Response, httpx.Response, list[bytes]]:
    seen: list[bytes] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        seen.append(body)
        if b'"stream":true' in body:
            answer = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await answer.prepare(request)
            for part in (b"data: 1\n\n", b"data: [DONE]\n\n"):
                await answer.write(part)
            await answer.write_eof()
            return answer
        return web.Response(status=201, body=b'{"ok":1}', content_type="application/json")

    upstream = web.Application()
    upstream.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(upstream)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    app = create_app(f"http://127.0.0.1:{port}/v1/")
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                plain = await client.post("/v1/chat/completions", content=b'{"a":1}')
                stream = await client.post("/v1/chat/completions", content=b'{"stream":true}')
    finally:
        await runner.cleanup()
    return plain, stream, seen


def test_relay_passes_body_status_type_and_stream_through() -> None:
    plain, stream, seen = asyncio.run(_relay_roundtrip())
    assert seen == [b'{"a":1}', b'{"stream":true}']
    assert (plain.status_code, plain.content) == (201, b'{"ok":1}')
    assert plain.headers["content-type"].startswith("application/json")
    assert stream.status_code == 200
    assert stream.headers["content-type"].startswith("text/event-stream")
    assert stream.content == b"data: 1\n\ndata: [DONE]\n\n"
