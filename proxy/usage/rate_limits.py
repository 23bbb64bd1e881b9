"""Rate limits: requests and tokens per minute, per team and per key, as token buckets.

Each limit is a bucket that holds up to a minute's worth and refills continuously at the
limit's rate (a burst may spend a whole minute's worth at once, then a request goes
through as the bucket refills; OpenAI's limits behave so). A request is admitted while
its requests buckets hold a whole request and its tokens buckets hold something, then
takes what it may use: requests never exceed their limit, and tokens taken at once
overshoot theirs by at most one request, as a hard quota does. Tokens
are taken as planned (the prompt and the answer limit) and settled when the request is
booked: what it did not use goes back, what it used beyond comes off.

Buckets live in the process (RateBook) or, with `--state`, in Redis (state/rate_shared.py),
where every replica draws on the same ones.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MINUTE_S = 60.0


@dataclass(frozen=True, slots=True)
class Draw:
    """What a request draws on one bucket: its name (`t:<team>:requests`,
    `k:<hash prefix>:tokens`), its limit per minute, and how much it takes."""

    bucket: str
    per_minute: int
    amount: float
    whole: bool = False  # the bucket must hold all of `amount` (a request), not just some

    @property
    def need(self) -> float:
        """What the bucket must hold for the draw: all of it, or anything (more than 0)."""
        return self.amount if self.whole else 0.0


@dataclass(frozen=True, slots=True)
class Level:
    """A bucket after a draw: what is left, and the seconds until it is full again."""

    bucket: str
    per_minute: int
    remaining: float
    reset_s: float


@dataclass(frozen=True, slots=True)
class Refused:
    """The first bucket that held nothing, and the seconds until it holds something."""

    bucket: str
    per_minute: int
    retry_after_s: float


def refill(level: float, elapsed_s: float, per_minute: int) -> float:
    return min(float(per_minute), level + max(elapsed_s, 0.0) * per_minute / MINUTE_S)


def until_full(level: float, per_minute: int) -> float:
    return max(0.0, (per_minute - level) * MINUTE_S / per_minute)


def until_some(level: float, per_minute: int, need: float = 0.0) -> float:
    """Seconds until a bucket at `level` holds more than `need` (0: anything)."""
    return max(0.0, need - level) * MINUTE_S / per_minute + 1e-3


def short(level: float, need: float) -> bool:
    """Whether a bucket at `level` refuses a draw that needs `need`."""
    return level <= 0 or level < need


class RateBook:
    """The buckets of one process: a bucket name -> (level, when it was last read)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def _level(self, bucket: str, per_minute: int, now: float) -> float:
        level, stamp = self._buckets.get(bucket, (float(per_minute), now))
        return refill(level, now - stamp, per_minute)

    def draw(self, draws: Sequence[Draw]) -> Refused | list[Level]:
        """Every draw taken when every bucket holds something (no await: atomic on the
        event loop), else nothing taken and the bucket that refused."""
        now = self._clock()
        levels = [self._level(d.bucket, d.per_minute, now) for d in draws]
        for d, level in zip(draws, levels, strict=True):
            if short(level, d.need):
                return Refused(d.bucket, d.per_minute, until_some(level, d.per_minute, d.need))
        out: list[Level] = []
        for d, level in zip(draws, levels, strict=True):
            left = level - d.amount
            self._buckets[d.bucket] = (left, now)
            out.append(Level(d.bucket, d.per_minute, left, until_full(left, d.per_minute)))
        return out

    def settle(self, bucket: str, per_minute: int, amount: float) -> None:
        """`amount` given back to the bucket (taken from it when negative)."""
        now = self._clock()
        level = self._level(bucket, per_minute, now)
        self._buckets[bucket] = (min(float(per_minute), level + amount), now)

    def forget(self, keep: Callable[[str], bool]) -> None:
        """Buckets of limits no policy sets any more let go (after a policy reload)."""
        for bucket in [b for b in self._buckets if not keep(b)]:
            del self._buckets[bucket]


def reset_text(seconds: float) -> str:
    """A duration as OpenAI writes `x-ratelimit-reset-*`: `1s`, `6m0s`, `250ms`."""
    if seconds < 1:
        return f"{max(1, math.ceil(seconds * 1000))}ms"
    whole = math.ceil(seconds)
    minutes, secs = divmod(whole, 60)
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


class LocalRates:
    """The process's buckets behind the interface the shared ones have (state/rate_shared)."""

    def __init__(self, book: RateBook | None = None) -> None:
        self.book = book or RateBook()

    async def draw(self, draws: Sequence[Draw]) -> Refused | list[Level]:
        return self.book.draw(draws)

    def settle(self, bucket: str, per_minute: int, amount: float) -> None:
        self.book.settle(bucket, per_minute, amount)

    async def aclose(self, timeout_s: float) -> None:
        return None
