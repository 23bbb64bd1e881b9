"""Benchmark: planning a 128k-token, 600-message conversation (target: under 5 ms warm).

Run: /work/venv/bin/python tests/bench/bench_plan.py
The first call counts every message (cold); the timed calls are what a next turn costs:
the same history again, counts served from the tokenizer's cache, everything else redone.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from proxy.planner import Kept
from proxy.planner.request import plan_request
from proxy.policy.model import HistoryPolicy, Policy
from proxy.relevance.scoring import TermIndex
from proxy.tokens.counter import TokenCounter

WORDS = [
    "the",
    "ledger",
    "refund",
    "charge",
    "invoice",
    "account",
    "amount",
    "currency",
    "rounding",
    "decimal",
    "test",
    "suite",
    "fixture",
    "schema",
    "migration",
    "webhook",
    "secret",
    "deploy",
    "staging",
    "approval",
    "payments",
    "team",
    "branch",
    "commit",
    "module",
    "function",
    "signature",
    "boundary",
    "precision",
    "cents",
    "euro",
    "customer",
    "total",
    "report",
]


def conversation(messages: int = 600, seed: int = 1) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful assistant. " * 20}
    ]
    call = 0
    while len(msgs) < messages - 1:
        if rng.random() < 0.15 and len(msgs) < messages - 2:
            call += 1
            cid = f"call_{call}"
            msgs.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                        }
                    ],
                }
            )
            msgs.append(
                {
                    "role": "tool",
                    "tool_call_id": cid,
                    "content": " ".join(rng.choices(WORDS, k=400)),
                }
            )
        else:
            role = "user" if len(msgs) % 2 else "assistant"
            msgs.append(
                {"role": role, "content": " ".join(rng.choices(WORDS, k=rng.randint(117, 303)))}
            )
    msgs.append({"role": "user", "content": "Which webhook secret does the staging deploy use?"})
    return msgs


def bench(label: str, body: dict[str, Any], policy: Policy, window: int, runs: int = 50) -> None:
    counter = TokenCounter()
    tokenizer = counter.for_model(body["model"], policy)
    terms = TermIndex()  # what the server keeps between requests, like the count cache
    start = time.perf_counter()
    first = plan_request(body, policy, tokenizer, window, kept=Kept(terms))
    cold = (time.perf_counter() - start) * 1000
    times = []
    for _ in range(runs):
        fresh = {**body, "messages": [dict(m) for m in body["messages"]]}  # a new request's objects
        start = time.perf_counter()
        plan_request(fresh, policy, tokenizer, window, kept=Kept(terms))
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    print(
        f"| {label:<34} | {first.tokens_before:>7,} | {first.tokens_after:>7,} | {first.trimmed:>4} "
        f"| {cold:>8.1f} | {statistics.median(times):>7.2f} | {times[int(len(times) * 0.95) - 1]:>7.2f} |"
    )


def main() -> None:
    msgs = conversation()
    body = {"model": "gpt-4o", "messages": msgs}
    relevance = Policy()
    recency = Policy(history=HistoryPolicy(relevance="off"))
    print(f"{len(msgs)} messages")
    print(
        "| case                               |  before |   after | trim |  cold ms | warm ms |  p95 ms |"
    )
    print(
        "|------------------------------------|---------|---------|------|----------|---------|---------|"
    )
    bench("within budget (window 400k)", body, relevance, 400_000)
    bench("over budget, recency (window 128k)", body, recency, 128_000)
    bench("over budget, bm25 (window 128k)", body, relevance, 128_000)
    bench("over budget, recency (window 32k)", body, recency, 32_000)
    bench("over budget, bm25 (window 32k)", body, relevance, 32_000)


if __name__ == "__main__":
    main()
