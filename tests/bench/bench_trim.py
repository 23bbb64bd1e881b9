"""Trimming benchmark: a 128k-token, 600-message conversation over budget, cold and warm.

Run: /work/venv/bin/python tests/bench/bench_trim.py [--repeats 5] [--no-http]

The conversation is bench_tokens.py's (gpt-4o, o200k tokens; the default policy's budget
is 0.8 x 128k, so about a fifth must go). In process, through proxy.planner.request.plan_request:
one raw tiktoken pass over all the text (the yardstick), the cold plan (a fresh
TokenCounter, nothing cached), and the next turn (the same history re-parsed from JSON
plus an answer and a new question, the counter warm), each also with the JSON parse and
re-encode around it. Over HTTP, a fresh proxy in front of the fast fake upstream: the very
first request (it loads o200k), a cold conversation after a warm-up, then next turns;
each also sent straight to the upstream, and the proxy's own time read from its usage
log (latency_ms - upstream_ms). Targets: cold within 1.5x of the raw pass,
next turn under 5 ms end to end. Writes tests/bench/results/trim.json.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

from bench_tokens import conversation, message, words  # noqa: E402
from overhead import context_proxy, fake_upstream  # noqa: E402
from plan_phases import timed_steps  # noqa: E402
from procs import machine, post  # noqa: E402

from proxy.planner import Kept, PlanMemo  # noqa: E402
from proxy.planner.request import plan_request  # noqa: E402
from proxy.policy.model import HistoryPolicy, Policy  # noqa: E402
from proxy.relevance.scoring import TermIndex  # noqa: E402
from proxy.server.app.app import tune_gc  # noqa: E402
from proxy.tokens.counter import TokenCounter  # noqa: E402
from proxy.tokens.text import load_encoding  # noqa: E402
from proxy.tokens.windows import ContextWindows  # noqa: E402

MODEL = "gpt-4o"
RESULTS = HERE / "results" / "trim.json"


def best_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(min(times) * 1000, 3)


def next_turn(raw: bytes, turn: int) -> bytes:
    """The same history (re-encoded bytes, as a client would send) plus an answer and a
    new question."""
    body = orjson.loads(raw)
    rng = random.Random(1000 + turn)
    vocab = words(rng)
    body["messages"] += [message(rng, vocab, 1001 + 2 * turn + k, 60) for k in range(2)]
    return orjson.dumps(body)


def in_process(raw: bytes, text: str, repeats: int) -> dict[str, Any]:
    policy = Policy()
    window = ContextWindows().lookup(MODEL, policy)
    encoding = load_encoding("o200k_base")
    out: dict[str, Any] = {"context_window": window}
    for _ in range(3):  # the first passes run slower (caches, clock): a fair yardstick
        encoding.encode_ordinary(text)
    out["raw_tiktoken_ms"] = best_ms(lambda: encoding.encode_ordinary(text), repeats)

    def cold() -> Any:
        tokenizer = TokenCounter().for_model(MODEL, policy)
        return plan_request(orjson.loads(raw), policy, tokenizer, window)

    def cold_plan_only(policy: Policy) -> float:
        """One plan with nothing cached: the parse and the tokenizer's setup (which
        checks the encoding file's hash) are left out, as in the raw pass."""
        body, tokenizer = orjson.loads(raw), TokenCounter().for_model(MODEL, policy)
        start = time.perf_counter()
        plan_request(body, policy, tokenizer, window)
        return time.perf_counter() - start

    result = cold()
    out["tokens_before"], out["tokens_after"] = result.tokens_before, result.tokens_after
    out["budget"], out["trimmed"], out["changed"] = result.budget, result.trimmed, result.changed
    out["cold_plan_ms"] = round(min(cold_plan_only(policy) for _ in range(repeats)) * 1000, 3)
    out["cold_parse_plan_encode_ms"] = best_ms(lambda: orjson.dumps(cold().body), repeats)
    out["cold_vs_raw"] = round(out["cold_plan_ms"] / out["raw_tiktoken_ms"], 2)

    counter = TokenCounter()
    tokenizer = counter.for_model(MODEL, policy)
    kept = Kept(TermIndex(), PlanMemo())  # kept between requests, as the server does
    plan_request(orjson.loads(raw), policy, tokenizer, window, kept=kept)  # the previous turn
    plans, ends = [], []
    for turn in range(repeats * 3):
        nxt = next_turn(raw, turn)
        start = time.perf_counter()
        body = orjson.loads(nxt)
        planned = time.perf_counter()
        outcome = plan_request(body, policy, tokenizer, window, kept=kept)
        done = time.perf_counter()
        orjson.dumps(outcome.body)
        ends.append(time.perf_counter() - start)
        plans.append(done - planned)
    out["next_turn_plan_ms"] = {"best": ms(min(plans)), "median": ms(median(plans))}
    out["next_turn_parse_plan_encode_ms"] = {"best": ms(min(ends)), "median": ms(median(ends))}
    out["next_turn_vs_raw"] = round(out["next_turn_plan_ms"]["median"] / out["raw_tiktoken_ms"], 3)
    bodies = [orjson.loads(next_turn(raw, turn)) for turn in range(repeats * 3)]
    with timed_steps() as spent:  # where a next turn's milliseconds go, step by step
        for body in bodies:
            plan_request(body, policy, tokenizer, window, kept=kept)
    out["next_turn_steps_ms"] = {k: ms(v / len(bodies)) for k, v in spent.most_common()}
    # The same with relevance off (recency only): what the rest of the planner costs.
    recency = Policy(history=HistoryPolicy(relevance="off"))
    cold_recency = min(cold_plan_only(recency) for _ in range(repeats))
    out["cold_plan_recency_ms"] = round(cold_recency * 1000, 3)
    out["cold_recency_vs_raw"] = round(out["cold_plan_recency_ms"] / out["raw_tiktoken_ms"], 2)
    plans = []
    for turn in range(repeats * 3):
        body = orjson.loads(next_turn(raw, turn))
        start = time.perf_counter()
        plan_request(body, recency, tokenizer, window, kept=kept)
        plans.append(time.perf_counter() - start)
    out["next_turn_plan_recency_ms"] = {"best": ms(min(plans)), "median": ms(median(plans))}
    return out


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def timed_post(port: int, raw: bytes) -> tuple[float, dict[str, str]]:
    start = time.perf_counter()
    status, headers, body = post(port, "/v1/chat/completions", raw)
    elapsed = time.perf_counter() - start
    if status != 200:
        raise RuntimeError(f"{status}: {body[:300]!r}")
    return elapsed, headers


def over_http(raw: bytes, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-trim-") as name:
        tmp = Path(name)
        up = fake_upstream(tmp).start()
        proxy = context_proxy(tmp, up.port, 1).start()
        try:
            out: dict[str, Any] = {}
            first, headers = timed_post(proxy.port, raw)
            out["first_request_ms"] = ms(first)  # includes loading o200k in the proxy
            out["headers"] = {k: v for k, v in headers.items() if k.startswith("x-context")}
            # A new conversation on a warm proxy: same size, different text, nothing cached.
            fresh = orjson.dumps({"model": MODEL, "messages": conversation(seed=8)})
            out["cold_conversation_ms"] = ms(timed_post(proxy.port, fresh)[0])
            out["cold_direct_ms"] = ms(timed_post(up.port, fresh)[0])
            proxied, direct = [], []
            for turn in range(repeats * 3):
                nxt = next_turn(raw, turn)
                proxied.append(timed_post(proxy.port, nxt)[0])
                direct.append(timed_post(up.port, nxt)[0])
            out["next_turn_ms"] = {"best": ms(min(proxied)), "median": ms(median(proxied))}
            out["next_turn_direct_ms"] = {"best": ms(min(direct)), "median": ms(median(direct))}
            out["next_turn_added_ms"] = ms(median(proxied) - median(direct))
            proxy.stop()  # flushes the usage log
            out["proxy_own_ms"] = own_times(tmp)
            return out
        finally:
            proxy.stop()
            up.stop()


def own_times(tmp: Path) -> list[float]:
    """Per request, the proxy's own time from its usage log: latency minus upstream."""
    log = next(tmp.glob("usage*.jsonl"))
    rows = [orjson.loads(line) for line in log.read_bytes().splitlines() if line.strip()]
    return [round(r["latency_ms"] - (r["upstream_ms"] or 0), 3) for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-http", action="store_true")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    tune_gc()  # the collector settings of a server process, which these figures stand for
    msgs = conversation()
    raw = orjson.dumps({"model": MODEL, "messages": msgs})
    text = "\n".join(m["content"] for m in msgs)
    report: dict[str, Any] = {"machine": machine(), "conversation": {}}
    report["conversation"] = {"messages": len(msgs), "chars": len(text), "json_bytes": len(raw)}
    report["in_process"] = in_process(raw, text, args.repeats)
    if not args.no_http:
        report["http"] = over_http(raw, args.repeats)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print_table(report)


def print_table(report: dict[str, Any]) -> None:
    c, p = report["conversation"], report["in_process"]
    rows = [
        ("conversation", f"{c['messages']} messages, {c['json_bytes']:,} bytes of JSON"),
        (
            "tokens before → after (budget)",
            f"{p['tokens_before']:,} → {p['tokens_after']:,} "
            f"({p['budget']:,}), {p['trimmed']} trimmed",
        ),
        ("raw tiktoken pass (encode_ordinary)", f"{p['raw_tiktoken_ms']:.1f} ms"),
        (
            "cold plan_request (fresh counter)",
            f"{p['cold_plan_ms']:.1f} ms = {p['cold_vs_raw']:.2f}x raw (target ≤ 1.5x)",
        ),
        ("cold parse + plan + encode", f"{p['cold_parse_plan_encode_ms']:.1f} ms"),
        (
            "next turn, plan alone (best / median)",
            "{best:.2f} / {median:.2f} ms".format(**p["next_turn_plan_ms"]),
        ),
        (
            "next turn, plan alone, median against the raw pass",
            f"{p['next_turn_vs_raw']:.3f}x (target ≤ 0.25x)",
        ),
        (
            "next turn, by step (ms; nested steps also in their caller's)",
            ", ".join(f"{k} {v:.2f}" for k, v in p["next_turn_steps_ms"].items()),
        ),
        (
            "next turn, parse + plan + encode",
            "{best:.2f} / {median:.2f} ms".format(**p["next_turn_parse_plan_encode_ms"]),
        ),
        (
            "relevance off: cold plan / next turn (median)",
            f"{p['cold_plan_recency_ms']:.1f} ms = {p['cold_recency_vs_raw']:.2f}x raw / "
            f"{p['next_turn_plan_recency_ms']['median']:.2f} ms",
        ),
    ]
    h = report.get("http")
    if h:
        own = h["proxy_own_ms"]
        rows += [
            ("HTTP: first request (loads o200k)", f"{h['first_request_ms']:.1f} ms"),
            (
                "HTTP: cold conversation (proxy / direct)",
                f"{h['cold_conversation_ms']:.1f} / {h['cold_direct_ms']:.1f} ms",
            ),
            (
                "HTTP: next turn (proxy / direct, median)",
                f"{h['next_turn_ms']['median']:.2f} / {h['next_turn_direct_ms']['median']:.2f} ms"
                f", added {h['next_turn_added_ms']:.2f} ms (target < 5 ms)",
            ),
            (
                "HTTP: proxy's own time, next turns (median)",
                f"{median(own[2:]):.2f} ms (usage log: latency - upstream)",
            ),
        ]
    width = max(len(a) for a, _ in rows)
    print(f"| {'measure':<{width}} | value |\n|{'-' * (width + 2)}|---|")
    for a, b in rows:
        print(f"| {a:<{width}} | {b} |")


if __name__ == "__main__":
    main()
