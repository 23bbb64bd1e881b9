"""create_app(settings): routes, and a lifespan that opens and closes the services."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy import responses
from proxy.auth import require_admin
from proxy.errors import InvalidRequest, NotFound, ProxyError
from proxy.handlers import chat_completions, context_plan
from proxy.logs import configure_logging
from proxy.passthrough import forward
from proxy.services import Services, open_services
from proxy.settings import Settings

ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


async def healthz(request: Request) -> Response:
    return Response(b'{"status":"ok"}', media_type="application/json")


async def metrics(request: Request) -> Response:
    services: Services = request.app.state.services
    try:
        require_admin(services.policies.current, request.headers)
    except ProxyError as exc:
        return responses.error(exc)
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


def create_app(settings: Settings) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with open_services(settings) as services:
            app.state.services = services
            yield

    routes = [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/context/plan", context_plan, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/v1/{rest:path}", forward, methods=ALL_METHODS),
    ]
    return Starlette(
        routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error}
    )


def app_from_env() -> Starlette:
    """The factory uvicorn's worker processes call: settings come from the environment."""
    configure_logging(os.environ.get("CONTEXT_PROXY_LOG_LEVEL", "info"))
    return create_app(Settings.from_env())
