"""Speed of relevance scoring: score_history over N history turns (target: < 5 ms at 700).

Cold: a throwaway index each call (every turn read). Warm: the server's TermIndex
kept between calls, as on the next request of a chat (target: about 1-3 ms at 600).

Usage: python tests/bench/bench_relevance.py [PATH/locomo10.json]

Turns come from LoCoMo's longest conversation when the file is there (read in place),
else from a seeded synthetic conversation with a Zipf-like vocabulary.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from proxy.relevance.scoring import TermIndex, score_history  # noqa: E402

DEFAULT_PATH = ROOT / ".." / "shared" / "data" / "locomo" / "locomo10.json"
QUERY = "When did Caroline go to the LGBTQ support group, and what did she paint?"


def locomo_turns(path: Path) -> list[str]:
    data = orjson.loads(path.read_bytes())
    best: list[str] = []
    for sample in data:
        conv = sample["conversation"]
        turns = [
            f"{t['speaker']}: {t['text']}"
            for k, v in conv.items()
            if k.startswith("session_") and isinstance(v, list)
            for t in v
        ]
        best = max(best, turns, key=len)
    return best


def synthetic_turns(n: int) -> list[str]:
    rnd = random.Random(0)
    vocab = [f"w{i}" for i in range(3000)] + ["the", "and", "painting", "support", "group"]
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    return [
        "Speaker: " + " ".join(rnd.choices(vocab, weights, k=rnd.randint(5, 45))) for _ in range(n)
    ]


def timed(fn: Callable[[], object], runs: int = 30) -> tuple[float, float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))]


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_PATH
    turns = locomo_turns(path) if path.exists() else synthetic_turns(1500)
    source = "LoCoMo" if path.exists() else "synthetic"
    while len(turns) < 1500:
        turns = turns + turns
    context = "\n".join(turns[-6:])
    print(f"turns from {source}; query: {QUERY!r}")
    print(
        f"{'turns':>6} {'cold ms':>8} {'p95':>6} {'+context ms':>12} {'p95':>6} "
        f"{'warm ms':>8} {'p95':>6}"
    )
    for n in (100, 300, 700, 1500):
        docs = turns[:n]
        q = timed(lambda d=docs: score_history(QUERY, d))  # type: ignore[misc]
        c = timed(lambda d=docs: score_history(QUERY, d, context=context))  # type: ignore[misc]
        index = TermIndex()
        w = timed(lambda d=docs, i=index: score_history(QUERY, d, context=context, index=i))  # type: ignore[misc]
        print(
            f"{n:>6} {q[0]:>8.2f} {q[1]:>6.2f} {c[0]:>12.2f} {c[1]:>6.2f} {w[0]:>8.2f} {w[1]:>6.2f}"
        )


if __name__ == "__main__":
    main()
