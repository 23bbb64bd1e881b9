"""The one place that talks to the upstream: pooled aiohttp session, timeouts, foreign errors."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import NamedTuple

import aiohttp
from yarl import URL

from proxy.errors import UpstreamTimeout, UpstreamTooLarge, UpstreamUnreachable
from proxy.upstream.headers import relayable_headers
from proxy.upstream.lean_request import SKIPPED_NAMES, LeanRequest


class UpstreamBroke(Exception):
    """The upstream failed after the answer started (reset, timeout, truncated body)."""

    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class Timeouts(NamedTuple):
    """A request's deadlines (a tuple: made per request, ~3x cheaper than a frozen dataclass)."""

    total_s: float
    connect_s: float
    retries: int = 0  # extra attempts for failures that happen before any answer exists


# Answers that mean "not processed, try again" (RFC 9110); 429 is passed through instead,
# with its Retry-After, since the client is the one that has to slow down.
RETRY_STATUSES = frozenset({502, 503, 504})
BACKOFF_BASE_S = 0.25
BACKOFF_CAP_S = 4.0
# A whole (non-streamed) answer is held in memory; past this it is refused, not grown.
MAX_ANSWER_BYTES = 64 * 1024 * 1024


def too_large(limit: int) -> str:
    return f"The upstream's answer is larger than {limit} bytes, the most the proxy holds."


class UpstreamResponse:
    """An upstream answer whose body is read whole (`read`) or piece by piece (`chunks`)."""

    __slots__ = ("_max_answer_bytes", "_response", "content_type", "headers", "status")

    def __init__(
        self, response: aiohttp.ClientResponse, max_answer_bytes: int = MAX_ANSWER_BYTES
    ) -> None:
        self._response = response
        self._max_answer_bytes = max_answer_bytes
        self.status = response.status
        self.headers = relayable_headers(response.raw_headers)
        self.content_type = response.headers.get("content-type", "")

    async def read(self) -> bytes:
        """The whole body, at most `max_answer_bytes` of it (else UpstreamTooLarge)."""
        limit = self._max_answer_bytes
        whole = False
        try:
            declared = self._response.content_length
            if declared is not None and declared > limit:
                raise UpstreamTooLarge(too_large(limit))
            if declared is not None:
                # A declared length within the cap: aiohttp reads exactly that much, in
                # one call, instead of a loop of chunks.
                body = await self._response.read()
                whole = True
                return body
            parts: list[bytes] = []
            size = 0
            async for chunk in self._response.content.iter_any():
                size += len(chunk)
                if size > limit:
                    raise UpstreamTooLarge(too_large(limit))
                parts.append(chunk)
            whole = True
            return b"".join(parts)
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise UpstreamTimeout("the upstream timed out while sending its answer") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnreachable(
                f"the upstream broke off its answer ({type(exc).__name__})"
            ) from exc
        finally:
            # Only a body read to its end may go back to the pool; a refused one is cut off.
            if whole:
                self._response.release()
            else:
                self.close()

    async def chunks(self) -> AsyncIterator[bytes]:
        """Each piece as it arrives; raises UpstreamBroke if the upstream fails mid-way."""
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise UpstreamBroke("the upstream stopped sending (timeout)", timed_out=True) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamBroke(f"the upstream connection broke ({type(exc).__name__})") from exc
        finally:
            self.close()

    def close(self) -> None:
        # close(), not release(): an unfinished body must not go back to the pool.
        if not self._response.closed:
            self._response.close()


class Upstream:
    """Owns the shared, pooled client session for the app's lifetime."""

    def __init__(
        self, session: aiohttp.ClientSession, max_answer_bytes: int = MAX_ANSWER_BYTES
    ) -> None:
        self._session = session
        self._max_answer_bytes = max_answer_bytes
        self._jitter = random.Random()
        self._timeouts: dict[tuple[float, float, bool], aiohttp.ClientTimeout] = {}

    @classmethod
    def open(cls, max_answer_bytes: int = MAX_ANSWER_BYTES) -> Upstream:
        connector = aiohttp.TCPConnector(
            limit=0, limit_per_host=0, keepalive_timeout=60, ttl_dns_cache=300
        )
        session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,  # bodies pass through as the upstream encoded them
            skip_auto_headers=SKIPPED_NAMES,
            request_class=LeanRequest,  # the skip rule above, applied without per-request copies
            trust_env=False,  # never route through a proxy picked up from the environment
        )
        return cls(session, max_answer_bytes)

    async def close(self) -> None:
        await self._session.close()

    async def send(
        self,
        method: str,
        url: str | URL,
        headers: list[tuple[str, str]],
        body: bytes | AsyncIterator[bytes] | None,
        timeouts: Timeouts,
        streaming: bool,
    ) -> UpstreamResponse:
        """Send a request; return once the status and headers arrived.

        With `timeouts.retries`, a refused connection or a 502/503/504 answer is retried with
        jittered exponential backoff — only for bodies held in memory (a streamed body cannot be
        sent twice), and always before any byte has reached the client.
        """
        if not timeouts.retries:  # the usual case: one attempt, no retry loop to set up
            return await self._send_once(method, url, headers, body, timeouts, streaming)
        attempts = 1 + (timeouts.retries if not isinstance(body, AsyncIterator) else 0)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = await self._send_once(method, url, headers, body, timeouts, streaming)
            except UpstreamUnreachable as exc:
                if last or not isinstance(exc.__cause__, aiohttp.ClientConnectorError):
                    raise
            else:
                if last or response.status not in RETRY_STATUSES:
                    return response
                response.close()
            ceiling = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt)
            await asyncio.sleep(self._jitter.uniform(0, ceiling))
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _send_once(
        self,
        method: str,
        url: str | URL,
        headers: list[tuple[str, str]],
        body: bytes | AsyncIterator[bytes] | None,
        timeouts: Timeouts,
        streaming: bool,
    ) -> UpstreamResponse:
        # Streams get a per-read timeout (a long answer may take minutes overall);
        # plain answers get the whole budget for headers and body.
        # Keyed by plain numbers (retries do not change the deadlines).
        key = (timeouts.total_s, timeouts.connect_s, streaming)
        timeout = self._timeouts.get(key)
        if timeout is None:  # one per policy setting, not one per request
            # A plain answer's total deadline covers its reads: no per-read timer, which
            # aiohttp would re-arm on every piece of data received.
            timeout = self._timeouts[key] = aiohttp.ClientTimeout(
                total=None if streaming else timeouts.total_s,
                sock_connect=timeouts.connect_s,
                sock_read=timeouts.total_s if streaming else None,
            )
        try:
            response = await self._session.request(
                method,
                url,
                headers=headers,  # pairs, repeats kept: aiohttp builds its own multidict
                data=body,
                timeout=timeout,
                allow_redirects=False,
            )
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise UpstreamTimeout("the upstream did not answer in time") from exc
        except aiohttp.InvalidURL as exc:
            raise UpstreamUnreachable("the upstream URL is invalid") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnreachable(
                f"the upstream could not be reached ({type(exc).__name__})"
            ) from exc
        except (ValueError, TypeError) as exc:
            # aiohttp refuses some configurations outright (credentials both in the URL
            # and in a header): a configuration fault, reported without its details,
            # which could hold a key.
            raise UpstreamUnreachable(
                "the request to the upstream could not be built; check upstream.base_url"
            ) from exc
        return UpstreamResponse(response, self._max_answer_bytes)
