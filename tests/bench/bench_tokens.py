"""Benchmark: counting a 128k-token, 600-message conversation, cold and on the next turn.

Run: /work/venv/bin/python tests/bench/bench_tokens.py
Targets: a cold count within 1.3x of raw tiktoken over the same text; the next
turn (same history, re-parsed, plus 2 new messages) under 2 ms.
Each request body is re-parsed from JSON, as the proxy sees it: no string object is reused.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from proxy.policy.model import Policy
from proxy.tokens.counter import TokenCounter
from proxy.tokens.text import load_encoding

MESSAGES = 600
TARGET_TOKENS = 128_000
REPEATS = 7


def words(rng: random.Random) -> list[str]:
    stems = ["context", "budget", "token", "proxy", "policy", "section", "memory", "summary"]
    stems += ["the", "a", "of", "to", "and", "in", "is", "for", "with", "on", "that", "we"]
    stems += ["déjà", "naïve", "日本語", "über", "json", "async", "def", "return", "self", "{}"]
    return stems + [
        "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 10)))
        for _ in range(2000)
    ]


def message(rng: random.Random, vocab: list[str], i: int, size: int) -> dict[str, Any]:
    role = "user" if i % 2 == 0 else "assistant"
    text = " ".join(rng.choice(vocab) for _ in range(size))
    if i % 7 == 3:  # some code-like content
        text += "\n```python\ndef f(x):\n    return {'k': x, 'n': [1, 2, 3]}\n```\n"
    return {"role": role, "content": text}


def conversation(seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    vocab = words(rng)
    encoding = load_encoding("o200k_base")
    msgs = [{"role": "system", "content": "You are a careful assistant. " * 20}]
    msgs += [message(rng, vocab, i, 80) for i in range(1, MESSAGES)]
    # Scale message sizes so the whole request is about TARGET_TOKENS o200k tokens.
    total = sum(len(encoding.encode_ordinary(m["content"])) for m in msgs)
    rng = random.Random(seed)
    size = int(80 * TARGET_TOKENS / total)
    vocab = words(rng)
    msgs = [msgs[0]] + [message(rng, vocab, i, size) for i in range(1, MESSAGES)]
    return msgs


def best(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    policy = Policy()
    start = time.perf_counter()
    encoding = load_encoding("o200k_base")  # the first load in this process
    load_s = time.perf_counter() - start
    msgs = conversation()
    raw_json = orjson.dumps({"model": "gpt-4o", "messages": msgs})
    text = "\n".join(m["content"] for m in msgs)
    tokens = len(encoding.encode_ordinary(text))

    raw_encode = best(lambda: encoding.encode(text))
    raw_ordinary = best(lambda: encoding.encode_ordinary(text))

    def cold() -> int:
        body = orjson.loads(raw_json)
        counter = TokenCounter()
        tokenizer = counter.chat_tokenizer("gpt-4o", policy)
        start = time.perf_counter()
        n = tokenizer.count_request(body)
        cold_times.append(time.perf_counter() - start)
        return n

    cold_times: list[float] = []
    counted = 0
    for _ in range(REPEATS):
        counted = cold()
    cold_s = min(cold_times)

    counter = TokenCounter()
    tokenizer = counter.chat_tokenizer("gpt-4o", policy)
    tokenizer.count_request(orjson.loads(raw_json))
    rng = random.Random(99)
    vocab = words(rng)
    warm_times = []
    for turn in range(REPEATS * 3):
        body = orjson.loads(raw_json)
        body["messages"] += [message(rng, vocab, 1000 + 2 * turn + k, 60) for k in range(2)]
        start = time.perf_counter()
        tokenizer.count_request(body)
        warm_times.append(time.perf_counter() - start)
    warm_s = min(warm_times)
    warm_median = sorted(warm_times)[len(warm_times) // 2]

    rows = [
        ("conversation", f"{len(msgs)} messages, {tokens:,} o200k tokens, {len(text):,} chars"),
        ("request counted (tokens)", f"{counted:,}"),
        ("load o200k_base (once per process)", f"{load_s * 1000:8.1f} ms"),
        ("raw tiktoken encode(text)", f"{raw_encode * 1000:8.1f} ms"),
        ("raw tiktoken encode_ordinary(text)", f"{raw_ordinary * 1000:8.1f} ms"),
        ("cold count_request (fresh counter)", f"{cold_s * 1000:8.1f} ms"),
        ("  cold / raw encode", f"{cold_s / raw_encode:8.2f} x   (target <= 1.3)"),
        ("  cold / raw encode_ordinary", f"{cold_s / raw_ordinary:8.2f} x"),
        ("next turn (history + 2 new), best", f"{warm_s * 1000:8.3f} ms   (target < 2 ms)"),
        ("next turn, median", f"{warm_median * 1000:8.3f} ms"),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"{'measure':<{width}}  value")
    print("-" * (width + 40))
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
