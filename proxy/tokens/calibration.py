"""Counting models without a public tokenizer (Claude, Gemini, Llama...): the estimate's
factor, calibrated from the prompt tokens the upstream reports.

An estimate is a base encoding's count times a per-family factor (1.25 for Claude): an
over-estimate, so that a budget holds. Each answer with usage tells how far off it was:
`reported / raw`, where raw is the base encoding's count of what was sent. Answers are
kept per (upstream, model): a team with its own upstream never moves another's counts.

The factor is a high quantile of the recent answers' ratios (the 90th of the last 64: the
worst of the first nine), plus a margin that narrows as answers come in (2% plus 20% over
the square root of their number). One odd answer (a body whose real cost the proxy cannot
see, an upstream reporting nonsense) moves it no further than the next, and it comes down
again as newer answers replace the odd ones. Whatever the answers, it stays within a band
around the family's factor (0.8x to 1.6x: 1.0 to 2.0 for Claude), and it falls below the
family's factor only after MIN_SAMPLES answers.

An upstream that refuses a request as too long and says how many tokens it counted shows a
ratio that was needed, not one answer among many: the factor is raised to it at once (the
quantile would pass one answer over), and it holds for the next RECENT answers.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass, field

MIN_SAMPLES = 3
FLOOR_MARGIN = 0.02
SPREAD = 0.20
MIN_CHANGE = 0.01  # a smaller move is not applied: counts (and plans) stay put
MAX_MODELS = 1024  # model names come from clients: the table stays bounded
RECENT = 64  # the answers the quantile is taken over
QUANTILE = 0.9
BAND = (0.8, 1.6)  # the factor's bounds, as multiples of the family's


def band(start: float) -> tuple[float, float]:
    """The lowest and highest factor a model whose family's factor is `start` may get."""
    return start * BAND[0], start * BAND[1]


def high_ratio(ratios: list[float]) -> float:
    """The QUANTILE of `ratios` (the nearest rank at or above it): robust to the top tenth."""
    ordered = sorted(ratios)
    return ordered[max(0, math.ceil(QUANTILE * len(ordered)) - 1)]


@dataclass(slots=True)
class _Seen:
    samples: int = 0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT))
    unsent: int = 0  # answers not yet handed to the shared state (with --state)
    needed: float = 0.0  # the ratio a length refusal showed was needed
    needed_for: int = 0  # answers it still holds for

    def high(self) -> float:
        """The ratio the factor follows: the recent answers' high quantile, or a refusal's."""
        return max(high_ratio(list(self.recent)) if self.recent else 0.0, self.needed)


def clamped_ratio(raw: float, reported: int, start: float) -> float | None:
    """An upstream's count over the raw estimate, clamped to the band around `start` as it
    comes in (an answer past the band counts as the band's edge); None for a figure that
    says nothing."""
    if raw <= 0 or reported <= 0 or not math.isfinite(raw):
        return None
    low, high = band(start)
    return min(max(reported / raw, low), high)


class CountCalibration:
    """The calibrated factor per (upstream, model) key; thread-safe (plans run in threads)."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}
        self._factors: dict[str, float] = {}
        self._lock = threading.Lock()

    def factor(self, key: str) -> float | None:
        """The key's calibrated factor, or None while it has none."""
        return self._factors.get(key)

    def observe(self, key: str, raw: float, reported: int, start: float) -> float | None:
        """Take one answer's reported prompt tokens against the raw estimate of what was
        sent; the new factor when it moved, else None."""
        ratio = clamped_ratio(raw, reported, start)
        if ratio is None:
            return None
        with self._lock:
            seen = self._seen_for(key)
            if seen is None:
                return None
            seen.samples += 1
            seen.unsent += 1
            seen.recent.append(ratio)
            if seen.needed_for:
                seen.needed_for -= 1
                seen.needed = seen.needed if seen.needed_for else 0.0
            return self._settle(key, seen.samples, seen.high(), start)

    def refused(self, key: str, raw: float, reported: int, start: float) -> float | None:
        """Take an upstream's count of a request it refused as too long against the raw
        estimate of what was sent: the factor at once at least that ratio (within the
        band); the new factor when it moved, else None."""
        ratio = clamped_ratio(raw, reported, start)
        if ratio is None:
            return None
        with self._lock:
            seen = self._seen_for(key)
            if seen is None:
                return None
            seen.needed = max(seen.needed, ratio)
            seen.needed_for = RECENT
            seen.unsent += 1
            return self._settle(key, max(seen.samples, 1), seen.high(), start)

    def take_unsent(self) -> dict[str, tuple[int, float]]:
        """Answers seen here since the last call and this replica's high ratio, by key: what
        the shared state adds to the fleet's."""
        with self._lock:
            out = {
                k: (s.unsent, s.high())
                for k, s in self._seen.items()
                if s.unsent and (s.recent or s.needed)
            }
            for key in out:
                self._seen[key].unsent = 0
            return out

    def give_back(self, taken: dict[str, tuple[int, float]]) -> None:
        """Answers `take_unsent` gave that never reached the shared state."""
        with self._lock:
            for key, (samples, _) in taken.items():
                if key in self._seen:
                    self._seen[key].unsent += samples

    def install(self, key: str, samples: int, ratio: float, start: float) -> float | None:
        """The fleet's figures for `key` (its answers' number and the highest of the
        replicas' high ratios, this one's included); the new factor when it moved, else
        None. A figure from outside is clamped to the band like an answer."""
        if samples <= 0 or not math.isfinite(ratio) or ratio <= 0:
            return None
        low, high = band(start)
        with self._lock:
            seen = self._seen_for(key)
            if seen is None:
                return None
            fleet = max(seen.high(), min(max(ratio, low), high))
            return self._settle(key, max(seen.samples, samples), fleet, start)

    def _seen_for(self, key: str) -> _Seen | None:
        """The key's record (made on first sight), or None once the table is full."""
        seen = self._seen.get(key)
        if seen is None and len(self._seen) < MAX_MODELS:
            seen = self._seen[key] = _Seen()
        return seen

    def _settle(self, key: str, samples: int, ratio: float, start: float) -> float | None:
        low, high = band(start)
        floor = ratio * (1 + FLOOR_MARGIN)  # not under what most answers showed
        ceiling = max(start, floor)  # not over the family's factor unless shown needed
        margin = SPREAD / math.sqrt(samples) if samples >= MIN_SAMPLES else math.inf
        wanted = min(floor * (1 + margin), ceiling)
        wanted = math.ceil(min(max(wanted, low), high) * 1000) / 1000  # rounded up
        current = self._factors.get(key, start)
        if abs(wanted - current) < MIN_CHANGE * current and current >= min(floor, high):
            return None
        self._factors[key] = wanted
        return wanted
