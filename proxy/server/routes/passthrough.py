"""Every other /v1 route: forwarded unchanged, bodies streamed both ways."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator
from urllib.parse import unquote

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from yarl import URL

from proxy.errors import (
    BodyTimeout,
    BodyTooLarge,
    Forbidden,
    InvalidRequest,
    ProxyError,
    UpstreamUnreachable,
)
from proxy.policy import Policy
from proxy.server.core import responses
from proxy.server.core.services import Services
from proxy.server.pipeline import request_body
from proxy.server.pipeline.auth import headers_not_forwarded, resolve_policy, upstream_authorization
from proxy.server.pipeline.disconnect import ClientGone, cancel_on_disconnect
from proxy.server.pipeline.exchange import Exchange, Figures
from proxy.server.pipeline.plan_step import (
    PLAN_INLINE_MAX_BYTES,
    off_loop,
    parsed_body,
    tokenizer_for,
)
from proxy.server.pipeline.quota_step import check_quota, hold_in_fleet
from proxy.server.pipeline.rate_step import count_request, key_name, take_tokens
from proxy.server.pipeline.request_body import parse_model_body, read_body, too_large
from proxy.server.routes.billed_use import billed_use
from proxy.server.routes.passthrough_rules import BILLED, Meter, route_allowed
from proxy.upstream import Timeouts, UpstreamBroke, UpstreamResponse, clean_headers
from proxy.usage import route_group

BODYLESS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})
# A billed body's values may be token ids (`[1234,5678,...]`: 5 bytes each); what is denser
# (one-digit numbers) is refused before it is parsed (body_limits.py).
TOKEN_ARRAY_BYTES = 3


async def forward(request: Request) -> Response:
    services: Services = request.app.state.services
    started = time.perf_counter()
    path = request.url.path
    body: BodyRelay | None = None
    ex: Exchange | None = None
    meter = Meter()
    try:
        policies = services.policies.current
        policy = resolve_policy(policies, request.headers)
        route = path.rstrip("/") or "/"
        if not policies.open_mode and not route_allowed(policy, request.method, route):
            raise Forbidden(
                f"{request.method} {route} is not open to this key: the team's policy lists "
                "the routes it may use past the planned ones in `passthrough`.",
                code="route_not_allowed",
            )
        declared = request.headers.get("content-length")
        limit = services.settings.max_body_bytes
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise BodyTooLarge(too_large(limit))
        raw: bytes | None = None
        if request.method == "POST" and route in BILLED:  # held like any planned request
            ex = Exchange(services.ids.next())
            ex.policy, ex.api = policy, route.rsplit("/", 1)[-1]
            await count_request(services, ex, key_name(policy, request.headers))
            raw = await read_body(request, limit)
            ex.model, use = await billed_request(services, policy, route, raw)
            ex.figures = Figures(None, None, use[0], use[0], 0, 0, 0, 0)
            ex.answer_floor = use[1]  # charged if the upstream reports no usage
            check_quota(services, ex, use)
            await hold_in_fleet(services, ex)
            await take_tokens(services, ex, use)
        headers = clean_headers(request.headers.raw, headers_not_forwarded(policies))
        if raw is not None:  # read whole: sent with its length, whatever the client's framing
            headers = [(k, v) for k, v in headers if k.lower() != "transfer-encoding"]
            headers.append(("content-length", str(len(raw))))
        elif declared is not None:
            headers.append(("content-length", declared))
        auth = upstream_authorization(policies, policy, request.headers, services.environ)
        if auth:
            headers.append(("authorization", auth))
        url = confined_url(services.settings.openai_base(policy), request)
        # A streamed body cannot be sent twice; requests without one get the policy's retries.
        bodyless = request.method in BODYLESS
        timeouts = Timeouts(
            policy.upstream.timeout_s,
            policy.upstream.connect_timeout_s,
            policy.upstream.retries if bodyless else 0,
        )
        if bodyless or raw is not None:
            async with cancel_on_disconnect(request):
                upstream = await services.upstream.send(
                    request.method, url, headers, raw, timeouts, streaming=True
                )
        else:
            body = BodyRelay(request, limit)
            upstream = await body.send(services, request.method, url, headers, timeouts)
    except ProxyError as exc:
        services.metrics.observe_passthrough(
            route_group(path), exc.status, time.perf_counter() - started
        )
        if ex is not None:
            ex.finish(services, exc.status, exc.code or exc.type)
        return responses.error(exc)
    except ClientGone:
        services.metrics.observe_passthrough(route_group(path), 499, time.perf_counter() - started)
        if ex is not None:
            ex.finish(services, 499, "client_disconnected")
        return Response(status_code=499)

    async def relay() -> AsyncGenerator[bytes]:
        status, error = upstream.status, None
        try:
            async for chunk in upstream.chunks():
                if ex is not None:
                    meter.answer_chunk(chunk)
                yield chunk
        except UpstreamBroke:
            status, error = 502, "upstream_broke"  # headers are gone: ending early is all
        finally:
            services.metrics.observe_passthrough(
                route_group(path), status, time.perf_counter() - started
            )
            if ex is not None:  # the billed route's row: what the upstream said it used
                ex.answered = 200 <= upstream.status < 300
                ex.take_usage(meter.usage())
                ex.finish(services, status, error)

    rated = ex.rate_headers if ex is not None else ()
    return responses.streamed(upstream.status, upstream.headers, relay(), rated)


async def billed_request(
    services: Services, policy: Policy, route: str, raw: bytes
) -> tuple[str, tuple[int, int]]:
    """A billed route's model, from its parsed body whatever the key order, and the most
    it may bill (billed_use.py); a big body parsed and counted in the heavy slot."""
    body = await parsed_body(services, policy.team, raw, parse_model_body, TOKEN_ARRAY_BYTES)
    model: str = body["model"]
    base = services.settings.openai_base(policy)
    tokenizer = await tokenizer_for(services, model, policy, base)
    if len(raw) > PLAN_INLINE_MAX_BYTES:
        use = await off_loop(services, policy.team, billed_use, route, body, tokenizer.count_text)
    else:
        use = billed_use(route, body, tokenizer.count_text)
    return model, use


def upstream_path(request: Request) -> str:
    """The request's path after /v1, still percent-encoded as the client sent it.

    The raw path is forwarded so the upstream sees exactly what the client wrote; a path
    with a dot segment, however encoded, is refused: it could climb out of the upstream's
    base path (`/v1/../admin`) to routes the upstream never meant to expose. Bytes outside
    printable ASCII are percent-encoded, so nothing in the path can reach the request line raw.
    """
    raw = request.scope.get("raw_path") or request.url.path.encode()
    path = "".join(chr(b) if 0x21 <= b <= 0x7E else f"%{b:02X}" for b in raw)
    decoded = path
    for _ in range(3):  # %252e%252e -> %2e%2e -> ..
        decoded = unquote(decoded)
    if any(segment in (".", "..") for segment in decoded.replace("\\", "/").split("/")):
        raise InvalidRequest("The path may not contain '.' or '..' segments.", code="invalid_path")
    return path[len("/v1") :] if path.startswith("/v1") else path


def confined_url(base: str, request: Request) -> URL:
    """The upstream URL for `request`: always on the base's host, under the base's path.

    The base is parsed on its own and the client's path appended as an already-encoded
    path, never by joining strings and parsing the result: with a base without a path,
    `http://up:80` + `%2F@evil:81/x` would read as user `up:80%2F` on host `evil:81`.
    The result is checked against the base all the same; anything else is refused with 400.
    """
    suffix = upstream_path(request)
    if not suffix.startswith("/"):  # `/v1%2F...`: the route matched on the decoded path
        suffix = "/" + suffix
    try:
        root = URL(base)
    except ValueError:
        root = URL()
    if not root.absolute or root.scheme not in ("http", "https"):
        raise UpstreamUnreachable("the upstream URL is invalid; check upstream.base_url")
    prefix = root.raw_path.rstrip("/")
    query = request.scope.get("query_string", b"")
    try:
        url = URL.build(
            scheme=root.scheme,
            user=root.raw_user,
            password=root.raw_password,
            host=root.raw_host or "",
            port=root.explicit_port,
            path=prefix + suffix,
            query_string="".join(
                chr(b) if 0x21 <= b <= 0x7E and b != 0x23 else f"%{b:02X}" for b in query
            ),
            encoded=True,
        )
    except ValueError:
        url = None
    if (
        url is None
        or (url.scheme, url.raw_host, url.port) != (root.scheme, root.raw_host, root.port)
        or not url.raw_path.startswith(prefix + "/")
    ):
        raise InvalidRequest("The path cannot be forwarded to the upstream.", code="invalid_path")
    return url


class BodyRelay:
    """Streams the client's body upstream, within the size limit and the read timeout."""

    def __init__(self, request: Request, limit: int) -> None:
        self._request = request
        self._limit = limit
        self.problem: ProxyError | None = None

    async def send(
        self,
        services: Services,
        method: str,
        url: URL,
        headers: list[tuple[str, str]],
        timeouts: Timeouts,
    ) -> UpstreamResponse:
        try:
            upstream = await services.upstream.send(
                method, url, headers, self._chunks(), timeouts, streaming=True
            )
        except ProxyError:
            if self.problem is not None:  # the body was refused: say why, not "unreachable"
                raise self.problem from None
            raise
        if self.problem is not None:
            upstream.close()
            raise self.problem
        return upstream

    async def _chunks(self) -> AsyncIterator[bytes]:
        size = 0
        stream = self._request.stream().__aiter__()
        deadline = asyncio.get_running_loop().time() + request_body.BODY_READ_TIMEOUT_S
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    chunk = await stream.__anext__()
            except StopAsyncIteration:
                return
            except TimeoutError:
                self.problem = BodyTimeout("The request body was not received in time.")
                raise
            except ClientDisconnect:
                return
            size += len(chunk)
            if size > self._limit:
                self.problem = BodyTooLarge(too_large(self._limit))
                raise self.problem
            yield chunk
