"""Memory under a stream of distinct conversations: the proxy's RSS as it plans thousands
of conversations it has never seen, each over budget, with a next turn for some.

Run: python tests/bench/bench_distinct_rss.py [--conversations 10000] [--clients 4]

One proxy worker (as `serve` runs it) in front of the fast fake upstream, gpt-4o given an
8,192-token window in the team's policy, so that every conversation (60 messages, about
15k tokens, its words drawn at random: nothing shared with another but the vocabulary) is
trimmed and ranked; every tenth also sends its next turn (what the worker keeps between
requests is used). The worker's RSS is read from /proc every 1,000 conversations: what
it keeps (token counts, the term index, plans) must level off at its bounds, not grow with
the number of conversations. Writes tests/bench/results/distinct_rss.json.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_tokens import message, words  # noqa: E402
from overhead import context_proxy, fake_upstream  # noqa: E402
from procs import machine, post, rss_mb  # noqa: E402

RESULTS = HERE / "results" / "distinct_rss.json"
POLICY = "models:\n  gpt-4o: {context_window: 8192}\n"
MESSAGES = 60


def bodies(seed: int) -> list[bytes]:
    """A conversation never seen before, and its next turn for every tenth."""
    rng = random.Random(seed)
    vocab = words(rng)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": f"You are assistant {seed}."}]
    msgs += [message(rng, vocab, i, 70) for i in range(1, MESSAGES)]
    out = [orjson.dumps({"model": "gpt-4o", "messages": msgs})]
    if seed % 10 == 0:
        msgs += [message(rng, vocab, MESSAGES + k, 70) for k in range(2)]
        out.append(orjson.dumps({"model": "gpt-4o", "messages": msgs}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-rss-") as name:
        tmp = Path(name)
        up = fake_upstream(tmp).start()
        proxy = context_proxy(tmp, up.port, 1)
        (tmp / "policies" / "default.yaml").write_text(POLICY)
        proxy.start()
        samples: list[dict[str, float]] = []
        failures = 0
        try:
            worker = max(proxy.rss(), key=lambda pid: proxy.rss()[pid])  # the serving process
            samples.append({"conversations": 0, "rss_mb": round(rss_mb(int(worker)), 1)})

            def one(seed: int) -> int:
                bad = 0
                for body in bodies(seed):
                    status, headers, _ = post(proxy.port, "/v1/chat/completions", body)
                    bad += status != 200 or headers.get("x-context-trimmed", "0") == "0"
                return bad

            with ThreadPoolExecutor(args.clients) as pool:
                for start in range(0, args.conversations, 1000):
                    seeds = range(start, min(start + 1000, args.conversations))
                    failures += sum(pool.map(one, seeds))
                    rss = round(rss_mb(int(worker)), 1)
                    samples.append({"conversations": seeds[-1] + 1, "rss_mb": rss})
                    print(f"{seeds[-1] + 1:>6} conversations: RSS {rss} MB", file=sys.stderr)
        finally:
            proxy.stop()
            up.stop()
    warm = samples[min(2, len(samples) - 1)]["rss_mb"]
    report = {
        "machine": machine(),
        "conversations": args.conversations,
        "failures": failures,
        "samples": samples,
        "growth_after_2000_mb": round(samples[-1]["rss_mb"] - warm, 1),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print("| conversations | worker RSS MB |\n|---|---|")
    for sample in samples:
        print(f"| {sample['conversations']:,} | {sample['rss_mb']} |")
    met = "yes" if report["growth_after_2000_mb"] < 10 and not failures else "**no**"
    print(
        f"\n| check | measured | met |\n|---|---|---|\n"
        f"| RSS growth after 2,000 conversations < 10 MB | "
        f"{report['growth_after_2000_mb']:+.1f} MB ({warm} -> {samples[-1]['rss_mb']}) | {met} |\n"
        f"| every request answered and trimmed | {failures} failures | "
        f"{'yes' if not failures else '**no**'} |"
    )


if __name__ == "__main__":
    main()
