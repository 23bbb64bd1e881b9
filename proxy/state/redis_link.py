"""Shared state in Redis: the connection, its health, and the summary cache with its locks."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from proxy.usage import Metrics

log = logging.getLogger("context_proxy.shared_state")

BACKEND = "redis"
SCHEMES = ("redis://", "rediss://", "unix://")
# Short timeouts: a slow Redis must cost a request path nothing, and the sync loop retries.
SOCKET_TIMEOUT_S = 1.0
SUMMARY_TTL_S = 30 * 24 * 3600
SUMMARY_PREFIX = "cp:summary:"
LOCK_PREFIX = "cp:summary-lock:"
MAX_LOCAL_LOCKS = 4096
# Everything a Redis client can raise when the server is away or misbehaves.
FAILURES: tuple[type[BaseException], ...] = (RedisError, OSError, TimeoutError)

_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def connect(url: str) -> Redis:
    """A pooled asyncio client; connects lazily, so a Redis that is down raises nothing here."""
    if not url.startswith(SCHEMES):
        raise ValueError(f"shared state URL must start with redis://, rediss:// or unix://: {url}")
    return Redis.from_url(
        url,
        decode_responses=True,
        socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=SOCKET_TIMEOUT_S,
        health_check_interval=10,
        # One immediate retry replaces a pooled connection that a Redis restart closed.
        retry=Retry(NoBackoff(), 1),
        max_connections=64,
    )


class Health:
    """Up or down, logged once per change and exported as a gauge; failures are counted."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.up: bool | None = None  # unknown until the first answer or failure

    def ok(self, unsent: int | None = None) -> None:
        if self.up is not True:
            log.info("shared state: Redis answers; quotas and summaries are shared")
        self.up = True
        self.metrics.set_shared_state(BACKEND, True, unsent)

    def failed(self, op: str, exc: BaseException, unsent: int | None = None) -> None:
        self.metrics.shared_state_failed(BACKEND, op)
        if self.up is not False:
            log.warning(
                "shared state: Redis unreachable (%s: %s); counting quotas locally until it "
                "returns",
                type(exc).__name__,
                exc,
            )
        self.up = False
        self.metrics.set_shared_state(BACKEND, False, unsent)


class RedisSummaryStore:
    """The summary cache shared by every replica; Redis errors never reach the caller."""

    def __init__(self, client: Redis, health: Health) -> None:
        self._client = client
        self._health = health
        self._unlock = client.register_script(_UNLOCK)
        # key -> (token, expiry on the monotonic clock). Local locks also stand in for Redis
        # while it is down: one process then never pays twice for a summary, replicas may.
        self._locks: dict[str, tuple[str | None, float]] = {}

    def _usable(self) -> bool:
        # While the sync loop sees Redis down, skip it instead of waiting on a timeout per call.
        return self._health.up is not False

    async def get_many(self, keys: Sequence[str]) -> dict[str, str]:
        if not keys or not self._usable():
            return {}
        try:
            values: list[Any] = await self._client.mget([SUMMARY_PREFIX + k for k in keys])
        except FAILURES as exc:
            self._health.failed("summary", exc)
            return {}
        return {k: v for k, v in zip(keys, values, strict=True) if isinstance(v, str)}

    async def put(self, key: str, text: str) -> None:
        if not self._usable():
            return
        try:
            await self._client.set(SUMMARY_PREFIX + key, text, ex=SUMMARY_TTL_S)
        except FAILURES as exc:
            self._health.failed("summary", exc)

    async def try_lock(self, key: str, ttl_s: float) -> bool:
        now = time.monotonic()
        held = self._locks.get(key)
        if held is not None and held[1] > now:
            return False
        if len(self._locks) >= MAX_LOCAL_LOCKS:
            self._locks = {k: v for k, v in self._locks.items() if v[1] > now}
        token: str | None = None
        if self._usable():
            token = uuid.uuid4().hex
            try:
                got = await self._client.set(
                    LOCK_PREFIX + key, token, nx=True, px=max(1, int(ttl_s * 1000))
                )
            except FAILURES as exc:
                self._health.failed("lock", exc)
                token = None  # fall back to the local lock
            else:
                if not got:
                    return False  # another replica is making this summary
        self._locks[key] = (token, now + ttl_s)
        return True

    async def unlock(self, key: str) -> None:
        held = self._locks.pop(key, None)
        if held is None or held[0] is None:
            return  # not ours, or only a local lock
        try:
            # Compare-and-delete: a lock that expired and was taken by another is left alone.
            await self._unlock(keys=[LOCK_PREFIX + key], args=[held[0]])
        except FAILURES as exc:
            self._health.failed("lock", exc)

    async def aclose(self) -> None:
        """Nothing to do: the client belongs to the SharedState that made this store."""
