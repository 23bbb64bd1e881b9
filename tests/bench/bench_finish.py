"""Benchmark: a finished request's bookkeeping (Exchange.take_usage + finish, then booked
by Books.drain: usage row, quotas, thresholds, metrics) in µs per request, in process, best
of several rounds. Off a running loop finish books at once, as the drain does a batch.

Run: /work/venv/bin/python tests/bench/bench_finish.py [--number 20000] [--rounds 7]
To compare with another revision: `git archive REV proxy | tar -x -C /tmp/old` and run it
with PYTHONPATH=/tmp/old (this script imports only `proxy`).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import proxy
from proxy.policy import PolicyStore
from proxy.server.core.books import Books
from proxy.server.pipeline.exchange import Exchange
from proxy.tokens import ContextWindows
from proxy.usage import Metrics, QuotaBook, ThresholdWatch


class Sink:
    """The usage log's `write`, without the writer thread (measured elsewhere)."""

    def __init__(self) -> None:
        self.rows = 0

    def write(self, record: Any) -> None:
        self.rows += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    (folder / "default.yaml").write_text("")
    policy = PolicyStore.load(str(folder)).current.default
    services: Any = SimpleNamespace(
        quotas=QuotaBook(), spend=QuotaBook(), thresholds=ThresholdWatch(), metrics=Metrics(),
        windows=ContextWindows(), usage=Sink(), books=Books(),
    )  # fmt: skip
    outcome = SimpleNamespace(
        budget=102_400, context_window=128_000, tokens_before=1200, tokens_after=1200,
        dropped=0, truncated=0, summarized=0, deduped=0, trimmed=0,
    )  # fmt: skip
    usage = {
        "prompt_tokens": 1200,
        "completion_tokens": 30,
        "prompt_tokens_details": {"cached_tokens": 1024},
    }

    def one() -> None:
        ex = Exchange("req_x", policy=policy, model="gpt-4o", outcome=outcome)  # type: ignore[arg-type]
        ex.upstream_started, ex.upstream_ended = ex.started, ex.started + 0.001
        ex.take_usage(usage)
        ex.finish(services, 200)

    for _ in range(2000):
        one()
    best = float("inf")
    for _ in range(args.rounds):
        start = time.process_time()  # CPU time: on a shared machine, waits are not ours
        for _ in range(args.number):
            one()
        best = min(best, (time.process_time() - start) / args.number)
    print(f"{Path(proxy.__file__).parent}: {best * 1e6:.2f} µs CPU per finished request")


if __name__ == "__main__":
    main()
