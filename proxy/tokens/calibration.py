"""Counting models without a public tokenizer (Claude, Gemini, Llama...): the estimate's
factor, calibrated from the prompt tokens the upstream reports.

An estimate is a base encoding's count times a per-family factor (1.25 for Claude): an
over-estimate, so that a budget holds. Each answer with usage tells how far off it was:
`reported / raw`, where raw is the base encoding's count of what was sent. The factor
becomes the worst ratio seen, plus a margin that narrows as answers come in (2% plus 20%
over the square root of their number), so it is never below what any answer showed: a
request is never sent over its window because of a count. It rises above the family's
factor only when an answer shows it must, and falls below it only after MIN_SAMPLES.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

MIN_SAMPLES = 3
FLOOR_MARGIN = 0.02
SPREAD = 0.20
MIN_CHANGE = 0.01  # a smaller move is not applied: counts (and plans) stay put
MAX_MODELS = 1024  # model names come from clients: the table stays bounded


@dataclass(slots=True)
class _Seen:
    samples: int = 0
    worst: float = 0.0  # the largest reported/raw ratio
    unsent: int = 0  # answers not yet handed to the shared state (with --state)


class CountCalibration:
    """The calibrated factor per estimated model; thread-safe (plans run in threads)."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}
        self._factors: dict[str, float] = {}
        self._lock = threading.Lock()

    def factor(self, model: str) -> float | None:
        """The model's calibrated factor, or None while it has none."""
        return self._factors.get(model)

    def observe(self, model: str, raw: float, reported: int, start: float) -> float | None:
        """Take one answer's reported prompt tokens against the raw estimate of what was
        sent; the new factor when it moved, else None."""
        if raw <= 0 or reported <= 0 or not math.isfinite(raw):
            return None
        with self._lock:
            seen = self._seen_for(model)
            if seen is None:
                return None
            seen.samples += 1
            seen.unsent += 1
            seen.worst = max(seen.worst, reported / raw)
            return self._settle(model, seen, start)

    def take_unsent(self) -> dict[str, tuple[int, float]]:
        """Answers seen here since the last call, and the worst ratio, by model: what the
        shared state adds to the fleet's."""
        with self._lock:
            out = {m: (s.unsent, s.worst) for m, s in self._seen.items() if s.unsent}
            for model in out:
                self._seen[model].unsent = 0
            return out

    def give_back(self, taken: dict[str, tuple[int, float]]) -> None:
        """Answers `take_unsent` gave that never reached the shared state."""
        with self._lock:
            for model, (samples, _) in taken.items():
                if model in self._seen:
                    self._seen[model].unsent += samples

    def install(self, model: str, samples: int, worst: float, start: float) -> float | None:
        """The whole fleet's answers for `model` (this replica's included); the new factor
        when it moved, else None."""
        if samples <= 0 or not math.isfinite(worst) or worst <= 0:
            return None
        with self._lock:
            seen = self._seen_for(model)
            if seen is None:
                return None
            seen.samples = max(seen.samples, samples)
            seen.worst = max(seen.worst, worst)
            return self._settle(model, seen, start)

    def _seen_for(self, model: str) -> _Seen | None:
        """The model's record (made on first sight), or None once the table is full."""
        seen = self._seen.get(model)
        if seen is None and len(self._seen) < MAX_MODELS:
            seen = self._seen[model] = _Seen()
        return seen

    def _settle(self, model: str, seen: _Seen, start: float) -> float | None:
        floor = seen.worst * (1 + FLOOR_MARGIN)  # never under what an answer showed
        ceiling = max(start, floor)  # never over the family's factor unless shown needed
        margin = SPREAD / math.sqrt(seen.samples) if seen.samples >= MIN_SAMPLES else math.inf
        wanted = math.ceil(min(floor * (1 + margin), ceiling) * 1000) / 1000  # rounded up
        current = self._factors.get(model, start)
        if abs(wanted - current) < MIN_CHANGE * current and current >= floor:
            return None
        self._factors[model] = wanted
        return wanted
