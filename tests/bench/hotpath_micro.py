"""Benchmark step 6: the per-request bookkeeping steps of the proxy, timed one by one in process.

Run: /work/venv/bin/python tests/bench/hotpath_micro.py [--number 20000]

The profile (profile_proxy.py, hotpath.py) says where a small request's CPU goes under
load; these loops give each bookkeeping step's own cost on a quiet core, and the cost of
the cheaper way a recommended change would use, so the saving can be checked before the
change is made. Nothing here touches the network; the usage writer gets a real thread.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from proxy.policy.model import QuotaPolicy, ThresholdPolicy
from proxy.server.core.request_ids import new_request_id
from proxy.usage.ledger import UsageRecord, utc_now_iso
from proxy.usage.metrics import Metrics
from proxy.usage.quotas import QuotaBook


def per_call_us(fn: Callable[[], object], number: int) -> float:
    """Best of 5 runs of `number` calls, in microseconds per call."""
    best = float("inf")
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, time.perf_counter() - began)
    return 1e6 * best / number


def wake_cost_us(rounds: int) -> float:
    """Event.set() when a thread sleeps on it (the usage writer between requests)."""
    event, done = threading.Event(), threading.Event()

    def writer() -> None:
        while not done.is_set():
            event.wait()
            event.clear()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    spent = 0.0
    for _ in range(rounds):
        time.sleep(0.0002)  # the writer is back asleep, as between two requests
        began = time.perf_counter()
        event.set()
        spent += time.perf_counter() - began
    done.set()
    event.set()
    thread.join()
    return 1e6 * spent / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000)
    n = parser.parse_args().number
    counter, prefix = itertools.count(), f"req_{os.urandom(8).hex()}"
    rng = random.Random()
    book, quotas, thresholds = QuotaBook(), QuotaPolicy(), ThresholdPolicy()
    metrics = Metrics()
    record = UsageRecord(request_id=new_request_id(), team="default", model="gpt-4o", status=200)
    record.upstream_ms, record.latency_ms, record.utilization = 1.2, 1.9, 0.01
    rows: list[tuple[str, Callable[[], object]]] = [
        ("new_request_id: os.urandom(12).hex()", new_request_id),
        ("  instead: random.getrandbits(96) formatted", lambda: f"req_{rng.getrandbits(96):024x}"),
        ("  instead: per-process prefix + counter", lambda: f"{prefix}{next(counter):x}"),
        ("utc_now_iso (usage row ts)", utc_now_iso),
        ("  instead: time.time() only (format in the writer thread)", time.time),
        ("UsageRecord(...) with its ts", lambda: UsageRecord(request_id="r", model="gpt-4o")),
        ("UsageRecord.to_json_line (orjson)", record.to_json_line),
        ("QuotaBook.add (datetime.now + strftime)", lambda: book.add("default", 20)),
        (
            "QuotaBook.status, no quota configured",
            lambda: book.status("default", quotas, thresholds),
        ),
        ("datetime.now(UTC)", lambda: datetime.now(UTC)),
        ("Metrics.observe_record (plain numbers)", lambda: metrics.observe_record(record)),
    ]
    print("| step | µs per call |\n|---|---|")
    for name, fn in rows:
        print(f"| {name} | {per_call_us(fn, n):.2f} |")
    print(f"| Event.set() waking a sleeping writer thread | {wake_cost_us(2000):.2f} |")


if __name__ == "__main__":
    main()
