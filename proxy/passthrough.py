"""Every other /v1 route: forwarded unchanged, bodies streamed both ways."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from proxy import responses
from proxy.auth import resolve_policy, upstream_authorization
from proxy.errors import BodyTooLarge, ProxyError
from proxy.handlers import upstream_url
from proxy.metrics import route_group
from proxy.services import Services
from proxy.upstream import Timeouts, UpstreamBroke, clean_headers


async def forward(request: Request) -> Response:
    services: Services = request.app.state.services
    started = time.perf_counter()
    path = request.url.path
    try:
        policies = services.policies.current
        policy = resolve_policy(policies, request.headers)
        declared = request.headers.get("content-length")
        limit = services.settings.max_body_bytes
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise BodyTooLarge(
                f"The request body is larger than the proxy's limit of {limit // 2**20} MiB."
            )
        headers = clean_headers(request.headers, frozenset({"authorization", "cookie"}))
        if declared is not None:
            headers.append(("content-length", declared))
        auth = upstream_authorization(policies, policy, request.headers, services.environ)
        if auth:
            headers.append(("authorization", auth))
        suffix = path[len("/v1") :] if path.startswith("/v1") else path
        url = upstream_url(services, policy, suffix)
        if request.url.query:
            url += "?" + request.url.query
        has_body = request.method not in ("GET", "HEAD", "DELETE", "OPTIONS")
        upstream = await services.upstream.send(
            request.method,
            url,
            headers,
            _body(request, limit) if has_body else None,
            Timeouts(policy.upstream.timeout_s, policy.upstream.connect_timeout_s),
            streaming=True,
        )
    except ProxyError as exc:
        services.metrics.observe_passthrough(
            route_group(path), exc.status, time.perf_counter() - started
        )
        return responses.error(exc)

    async def relay() -> AsyncIterator[bytes]:
        status = upstream.status
        try:
            async for chunk in upstream.chunks():
                yield chunk
        except UpstreamBroke:
            status = 502  # headers are gone already; ending the body early is all we can do
        finally:
            services.metrics.observe_passthrough(
                route_group(path), status, time.perf_counter() - started
            )

    return responses.streamed(upstream.status, upstream.headers, relay())


async def _body(request: Request, limit: int) -> AsyncIterator[bytes]:
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge("The request body is larger than the proxy's limit.")
            yield chunk
    except ClientDisconnect:
        return
