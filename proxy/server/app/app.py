"""create_app(settings): routes, and a lifespan that opens and closes the services."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from types import FrameType

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from proxy.errors import InvalidRequest, NotFound, ProxyError
from proxy.server.app.logs import configure_logging
from proxy.server.app.route_paths import canonical_path
from proxy.server.core import responses
from proxy.server.core.services import Services, open_services
from proxy.server.core.settings import Settings
from proxy.server.core.shutdown import cut_by_shutdown
from proxy.server.dialects.chat import CHAT
from proxy.server.dialects.messages import MESSAGES
from proxy.server.dialects.responses import COMPACT, RESPONSES
from proxy.server.pipeline.auth import require_metrics_reader
from proxy.server.pipeline.dialect import Dialect
from proxy.server.pipeline.pipeline import run
from proxy.server.routes.count_tokens import count_message_tokens
from proxy.server.routes.passthrough import forward
from proxy.server.routes.plan_route import context_plan

ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
# Container allocations between young-generation collections (CPython's default is 700).
# A 600-message request parses into thousands of dicts that live for the whole request, so
# at 700 each one triggers several collections that promote its objects to the old
# generations, and full collections follow (~20 ms each, measured, every ~10 big requests).
# Reference counting frees a request's objects either way; this only spaces out the
# cycle hunts. Measured on the 600-message next turn: -0.9 ms median, no 20 ms stalls.
GC_YOUNG_THRESHOLD = 50_000


async def healthz(request: Request) -> Response:
    """`ok`; `degraded` while the usage log cannot be written. Still 200: the proxy serves
    requests (rows wait in a bounded queue), and a 503 would make load balancers pull
    every replica sharing a full disk, turning an accounting problem into an outage."""
    services: Services = request.app.state.services
    if services.usage.failing:
        return Response(
            b'{"status":"degraded","usage_log":"failing"}', media_type="application/json"
        )
    return Response(b'{"status":"ok"}', media_type="application/json")


async def metrics(request: Request) -> Response:
    services: Services = request.app.state.services
    try:
        require_metrics_reader(services.policies.current, request.headers)
    except ProxyError as exc:
        return responses.error(exc)
    services.books.drain()  # every request finished so far, counted
    body, content_type = services.metrics.render()
    return Response(body, headers={"content-type": content_type})


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 in OpenAI's error shape."""
    status = exc.status_code if isinstance(exc, HTTPException) else 400
    if status == 404:
        return responses.error(NotFound(f"No route for {request.method} {request.url.path}."))
    error = InvalidRequest(f"{request.method} is not allowed on {request.url.path}.")
    error.status = status
    return responses.error(error)


Endpoint = Callable[[Request], Awaitable[Response]]


def served(dialect: Dialect) -> Endpoint:
    """The endpoint of a planned API: the pipeline, in its dialect."""

    async def endpoint(request: Request) -> Response:
        return await run(request, dialect)

    return endpoint


class ProxyApp(Starlette):
    """Starlette, with the planned APIs' POSTs handed straight to their endpoints.

    Starlette's two middlewares and its router (a regex per route) cost ~8 µs of a small
    request's CPU (measured in process), 5% of the whole. The endpoints need none of it: each
    answers every failure itself (an OpenAI-shaped error and a usage row), so only a bug
    escaping one is caught here. Any other method, path or scope, and a server mounted
    under a root path, goes through Starlette as before: same answers, same 404 and 405.
    """

    def __init__(self, direct: dict[str, Endpoint], **options: object) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        self._direct = direct
        self._metered = frozenset(direct)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = canonical_path(scope["path"], self._metered)
            if path != scope["path"]:  # routed, and forwarded, as the one spelling
                scope["path"] = path
                scope["raw_path"] = path.encode()
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            path = scope["path"]
            endpoint = self._direct.get(path)
            if endpoint is None and path.endswith("/"):  # `/v1/chat/completions/` is planned too
                endpoint = self._direct.get(path.rstrip("/"))
            if endpoint is not None:
                scope["app"] = self
                await self._planned(endpoint, scope, receive, send)
                return
        await super().__call__(scope, receive, send)


    async def _planned(
        self, endpoint: Endpoint, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """One planned request, in flight until its answer is out: the end of the shutdown's
        grace cuts it (core/shutdown.py). A stream cut after its error event still ends as
        a whole HTTP answer."""
        services: Services = self.state.services
        task = asyncio.current_task()
        assert task is not None
        services.in_flight.add(task)
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        request = Request(scope, receive, sending)
        try:
            try:
                response = await endpoint(request)
            except Exception as exc:
                response = await responses.internal_error(request, exc)
            await response(scope, receive, sending)
        except asyncio.CancelledError:
            if not (started and cut_by_shutdown(services.stopping)):
                raise
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            services.in_flight.discard(task)


def note_sigterm(services: Services) -> None:
    """Mark the services as stopping on SIGTERM, then let the server's own handler drain
    (uvicorn's, installed before the lifespan starts): a stream the grace period cuts is
    recorded as the server's doing (`server_shutdown`), not the client's. Outside the main
    thread (an embedded app) there is no signal to watch."""
    previous = signal.getsignal(signal.SIGTERM)
    loop = asyncio.get_running_loop()
    grace_s = services.settings.graceful_shutdown_s

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        services.stopping = True
        # Requests still in flight when the grace ends are cut by the proxy, a moment
        # before the server would cut them with a bare 500.
        loop.call_soon_threadsafe(services.in_flight.cut_after, loop, grace_s)
        if callable(previous):
            previous(signum, frame)

    with contextlib.suppress(ValueError):  # not the main thread
        signal.signal(signal.SIGTERM, on_sigterm)


def create_app(settings: Settings) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with open_services(settings) as services:
            app.state.services = services
            note_sigterm(services)
            yield

    chat, responses_api, messages = served(CHAT), served(RESPONSES), served(MESSAGES)
    compact = served(COMPACT)
    direct: dict[str, Endpoint] = {
        "/v1/chat/completions": chat,
        "/chat/completions": chat,
        "/v1/responses": responses_api,
        "/responses": responses_api,
        "/v1/responses/compact": compact,
        "/responses/compact": compact,
        "/v1/messages": messages,
        "/messages": messages,
        "/v1/messages/count_tokens": count_message_tokens,
        "/messages/count_tokens": count_message_tokens,
        "/v1/context/plan": context_plan,
    }
    routes = [
        *(Route(path, endpoint, methods=["POST"]) for path, endpoint in direct.items()),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/v1/{rest:path}", forward, methods=ALL_METHODS),
    ]
    return ProxyApp(
        direct,
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error, Exception: responses.internal_error},
    )


def app_from_env() -> Starlette:
    """The factory uvicorn's worker processes call: settings come from the environment."""
    configure_logging(os.environ.get("CONTEXT_PROXY_LOG_LEVEL", "info"))
    app = create_app(Settings.from_env())
    tune_gc()
    return app


def tune_gc() -> None:
    """Process-wide collector settings for a server process (not for tests or the CLI).

    The ~60k objects alive after start (modules, classes, functions) never become garbage:
    frozen, a full collection no longer walks them (measured 19 ms -> 4 ms each)."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)
    gc.freeze()
