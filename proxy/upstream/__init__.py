"""The one HTTP client for the upstream, the SSE relay tap, and header hygiene."""

from proxy.upstream.client import Timeouts, Upstream, UpstreamBroke, UpstreamResponse
from proxy.upstream.headers import clean_headers, percent_encoded
from proxy.upstream.responses_sse import ResponsesTap, response_error_event
from proxy.upstream.sse import StreamTap, error_event

__all__ = [
    "ResponsesTap",
    "StreamTap",
    "Timeouts",
    "Upstream",
    "UpstreamBroke",
    "UpstreamResponse",
    "clean_headers",
    "error_event",
    "percent_encoded",
    "response_error_event",
]
