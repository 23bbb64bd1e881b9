"""The proxy's own errors, rendered in OpenAI's error shape."""

from __future__ import annotations

import math

import orjson


class ProxyError(Exception):
    """An error the proxy answers itself; `status` and `code` follow the contract."""

    status = 500
    type = "api_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def body(self) -> bytes:
        return error_body(self.message, self.type, self.param, self.code)

    def headers(self) -> tuple[tuple[bytes, bytes], ...]:
        """Headers the error answer carries besides the JSON content type."""
        return ()


def error_body(message: str, type_: str, param: str | None, code: str | None) -> bytes:
    return orjson.dumps(
        {"error": {"message": message, "type": type_, "param": param, "code": code}}
    )


class InvalidRequest(ProxyError):
    status = 400
    type = "invalid_request_error"


class ContextLengthExceeded(InvalidRequest):
    """The required parts alone exceed the budget and the policy says `reject`."""

    code = "context_length_exceeded"

    def __init__(self, message: str) -> None:
        super().__init__(message, param="messages")


class BodyTimeout(ProxyError):
    """The client did not finish sending its body in time."""

    status = 408
    type = "invalid_request_error"
    code = "body_timeout"


class Unauthorized(ProxyError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class Forbidden(ProxyError):
    status = 403
    type = "invalid_request_error"
    code = "forbidden"


class NotFound(ProxyError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class BodyTooLarge(ProxyError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class QuotaExceeded(ProxyError):
    """A hard quota is spent: `Retry-After` says when it resets, and `x-should-retry:
    false` keeps the official SDKs from retrying at once (each retry a row of its own)."""

    status = 429
    type = "insufficient_quota"
    code = "quota_exceeded"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = max(1, retry_after_s)

    def headers(self) -> tuple[tuple[bytes, bytes], ...]:
        return ((b"retry-after", b"%d" % self.retry_after_s), (b"x-should-retry", b"false"))


class RateLimited(ProxyError):
    """A rate limit (requests or tokens per minute) has nothing left: a 429 in OpenAI's
    shape whose `retry-after` and `retry-after-ms` the official SDKs wait for, then retry;
    with the `x-ratelimit-*` headers of the limit that refused it."""

    status = 429
    code = "rate_limit_exceeded"

    def __init__(
        self, message: str, kind: str, retry_after_s: float, headers: list[tuple[bytes, bytes]]
    ) -> None:
        super().__init__(message)
        self.type = kind  # "requests" or "tokens", as OpenAI's own says
        self.retry_after_s = retry_after_s
        self._headers = headers

    def headers(self) -> tuple[tuple[bytes, bytes], ...]:
        seconds = max(1, math.ceil(self.retry_after_s))
        millis = max(1, math.ceil(self.retry_after_s * 1000))
        return (
            (b"retry-after", b"%d" % seconds),
            (b"retry-after-ms", b"%d" % millis),
            *self._headers,
        )


class PlanFailed(ProxyError):
    """Planning hit a bug. Chat requests are forwarded as they came instead (fail open);
    only the dry-run plan endpoint, which has nothing else to answer, says so."""

    status = 500
    type = "api_error"
    code = "plan_failed"


class UpstreamUnreachable(ProxyError):
    status = 502
    type = "upstream_error"
    code = "upstream_unreachable"


class UpstreamTooLarge(UpstreamUnreachable):
    """A whole answer over the size the proxy holds in memory: refused, not grown."""

    code = "upstream_response_too_large"


class UpstreamTimeout(ProxyError):
    status = 504
    type = "upstream_error"
    code = "upstream_timeout"
