"""Benchmark floor: the minimal Starlette + aiohttp relay the proxy's hot path is compared to.

Run: /work/venv/bin/python tests/bench/relay.py --port 9200 --upstream http://127.0.0.1:9100/v1

One route, POST /v1/chat/completions: read the body, send it with one pooled aiohttp
ClientSession to UPSTREAM/chat/completions, and answer with the upstream's status and
content-type (plain: the whole answer; `text/event-stream`: the chunks as they come, in a
StreamingResponse). No parsing, no policy, no accounting, nothing else: what any Python
relay on this stack must spend per request. uvicorn runs it with the proxy's own serve
options (uvloop, httptools, lifespan on, access log off, no server header, no proxy
headers), so the difference between the two is the proxy's own work. GET /healthz is 200.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator

import aiohttp
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route


def create_app(upstream: str) -> Starlette:
    target = upstream.rstrip("/") + "/chat/completions"

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # One pooled session for the process, as the proxy keeps one; no total limit on
        # connections per host (the proxy's pool is not the bottleneck at 64 either).
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
            app.state.session = session
            yield

    async def chat(request: Request) -> Response:
        session: aiohttp.ClientSession = request.app.state.session
        body = await request.body()
        headers = {"content-type": "application/json"}
        auth = request.headers.get("authorization")
        if auth:
            headers["authorization"] = auth
        upstream_response = await session.post(target, data=body, headers=headers)
        content_type = upstream_response.headers.get("content-type", "application/json")
        if "event-stream" in content_type:

            async def chunks() -> AsyncIterator[bytes]:
                try:
                    async for chunk in upstream_response.content.iter_any():
                        yield chunk
                finally:
                    upstream_response.release()

            return StreamingResponse(
                chunks(), status_code=upstream_response.status, media_type=content_type
            )
        async with upstream_response:
            answer = await upstream_response.read()
        return Response(answer, status_code=upstream_response.status, media_type=content_type)

    async def healthz(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--upstream", required=True, help="base URL, e.g. http://h:p/v1")
    args = parser.parse_args()
    uvicorn.run(
        create_app(args.upstream),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_config=None,
        server_header=False,
        proxy_headers=False,
    )


if __name__ == "__main__":
    main()
