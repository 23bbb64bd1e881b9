"""Cache benchmark: how much of each trimmed prompt repeats the previous turn's, and at what recall.

Usage: python tests/bench/bench_cache.py [--convs N] [--questions N] [--runs N]
       [--budgets 4000,8000] [--agent-budgets 16000,32000] [--out PATH]

LoCoMo conversations are replayed one user turn at a time, as a chat app resends them
(request t = the system prompt and every turn up to the t-th user turn), under a budget
(a window of budget / 0.8), and each method trims every request. The agent runs in
/work/shared/data/agent-runs are replayed step by step (request k = the messages before
step k's assistant message). For every request after the first, the cached tokens are
those of the whole leading messages identical to the previous request's forwarded prompt,
counted as OpenAI caches: nothing below 1,024 tokens, else rounded down to 128-token
steps. The effective input cost prices cached tokens at 10% (1.0 = everything at full
price). Evidence recall: LoCoMo's questions asked at the end of the conversation, an
evidence turn counting when it is forwarded verbatim or inside the recall message.
Methods: the planner in cache mode, the planner per request (cache off, today's optimum),
keep-newest (whole messages, newest first).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

from baselines import keep_newest  # noqa: E402
from bench_locomo import DEFAULT_PATH, MODEL, SYSTEM, Conversation, load, tokenizer  # noqa: E402

from proxy.planner import Kept, Refused, plan_request  # noqa: E402
from proxy.planner.history.recall import RECALL_HEAD  # noqa: E402
from proxy.policy.model import BudgetPolicy, CachePolicy, ModelPolicy, Policy  # noqa: E402
from proxy.relevance import TermIndex  # noqa: E402

RESULTS = HERE / "results" / "cache.json"
AGENT_RUNS = HERE.parents[1] / ".." / "shared" / "data" / "agent-runs" / "trajectories.jsonl"
CACHE_MIN, CACHE_STEP, CACHED_PRICE = 1024, 128, 0.1

Trim = Callable[[dict[str, Any]], list[Any]]


def cached_tokens(prev: Sequence[Any] | None, out: Sequence[Any], costs: Sequence[int]) -> int:
    """Tokens of the whole leading messages `out` shares with `prev`, as OpenAI caches them."""
    if prev is None:
        return 0
    same = 0
    for a, b, c in zip(prev, out, costs, strict=False):
        if a != b:
            break
        same += c
    return 0 if same < CACHE_MIN else same - same % CACHE_STEP


def planner(policy: Policy, tok: Any) -> Trim:
    terms = TermIndex()  # as the server keeps one per worker

    def run(body: dict[str, Any]) -> list[Any]:
        window = policy.models[MODEL].context_window
        try:
            out = plan_request(body, policy, tok, window, kept=Kept(terms)).body
        except Refused:
            return []
        return list(out["messages"])

    return run


def newest(tok: Any, budget: int) -> Trim:
    def run(body: dict[str, Any]) -> list[Any]:
        messages = body["messages"]
        head = 1 if messages and messages[0].get("role") == "system" else 0
        last = max(i for i, m in enumerate(messages) if m.get("role") == "user")
        if any(m.get("role") == "tool" for m in messages[last:]):
            last = len(messages) - 1  # an agent: keep whole tool groups, newest first
            while last > head and messages[last].get("role") == "tool":
                last -= 1
        history = messages[head:last]
        costs = [tok.count_message(m) for m in history]
        fixed = sum(tok.count_message(m) for m in (*messages[:head], *messages[last:]))
        fixed += tok.count_request_overhead({**body, "messages": []})
        kept = keep_newest(costs, fixed, budget)
        first = kept[0] if kept else len(history)
        while first < len(history) and history[first].get("role") == "tool":
            first += 1  # never a tool result without its call
        return [*messages[:head], *history[first:], *messages[last:]]

    return run


def methods(
    tok: Any, budget: int, truncate: bool = False, cache: CachePolicy | None = None
) -> dict[str, Trim]:
    base = Policy(
        budget=BudgetPolicy(
            ratio=0.8,
            reserve_output=False,
            on_required_overflow="truncate" if truncate else "reject",
        ),
        models={MODEL: ModelPolicy(context_window=budget * 5 // 4)},
        cache=CachePolicy(enabled=False),
    )
    return {
        "cache": planner(replace(base, cache=replace(cache or CachePolicy(), enabled=True)), tok),
        "per-request": planner(base, tok),
        "keep-newest": newest(tok, budget),
    }


class Tally:
    def __init__(self) -> None:
        self.requests = self.trimmed = self.fits = self.breaks = 0
        self.tokens = self.cached = self.trim_tokens = self.trim_cached = 0
        self.prev: list[Any] | None = None
        self.seconds = 0.0

    def add(self, out: list[Any], tok: Any, budget: int, trimmed: bool, body: Any) -> None:
        costs = [tok.count_message(m) for m in out]
        total = sum(costs) + tok.count_request_overhead({**body, "messages": out})
        hit = cached_tokens(self.prev, out, costs)
        self.requests += 1
        self.fits += total <= budget
        self.tokens += total
        self.cached += hit
        if trimmed:
            self.trimmed += 1
            self.trim_tokens += total
            self.trim_cached += hit
            self.breaks += hit == 0
        self.prev = out

    def row(self) -> dict[str, Any]:
        def cost(tokens: int, cached: int) -> float:
            return (tokens - cached + CACHED_PRICE * cached) / tokens if tokens else 1.0

        return {
            "requests": self.requests,
            "trimmed_requests": self.trimmed,
            "fits": self.fits / max(1, self.requests),
            "prompt_tokens": self.tokens,
            "cached_share": self.cached / max(1, self.tokens),
            "effective_cost": cost(self.tokens, self.cached),
            "trimmed_cached_share": self.trim_cached / max(1, self.trim_tokens),
            "trimmed_effective_cost": cost(self.trim_tokens, self.trim_cached),
            "trimmed_uncached_requests": self.breaks,
            "ms_per_request": 1000 * self.seconds / max(1, self.requests),
        }


def replay(
    requests: Sequence[dict[str, Any]], trims: dict[str, Trim], tok: Any, budget: int
) -> dict[str, Tally]:
    tallies = {name: Tally() for name in trims}
    for body in requests:
        total = sum(map(tok.count_message, body["messages"])) + tok.count_request_overhead(body)
        for name, trim in trims.items():
            start = time.perf_counter()
            out = trim(body)
            tallies[name].seconds += time.perf_counter() - start
            tallies[name].add(out, tok, budget, total > budget, body)
    return tallies


def chat_requests(conv: Conversation) -> list[dict[str, Any]]:
    system = {"role": "system", "content": SYSTEM}
    return [
        {"model": MODEL, "messages": [system, *conv.messages[: t + 1]]}
        for t, m in enumerate(conv.messages)
        if m["role"] == "user"
    ]


def evidence(conv: Conversation, out: Sequence[Any], ids: Sequence[int]) -> tuple[int, int]:
    """Evidence turns forwarded verbatim, and those only inside the recall message."""
    present = {conv.by_content.get(m.get("content")) for m in out if isinstance(m, dict)}
    recall = "\n".join(
        m["content"]
        for m in out
        if isinstance(m.get("content"), str) and m["content"].startswith(RECALL_HEAD)
    )
    verbatim = sum(i in present for i in ids)
    recalled = sum(i not in present and conv.messages[i]["content"] in recall for i in ids)
    return verbatim, recalled


def load_runs(limit: int) -> list[dict[str, Any]]:
    if not AGENT_RUNS.exists() or limit <= 0:
        return []
    lines = AGENT_RUNS.read_bytes().splitlines()
    return [orjson.loads(line) for line in lines[:limit]]


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--convs", type=int, default=10, help="LoCoMo conversations replayed")
    ap.add_argument("--questions", type=int, default=400, help="questions sampled (seed 0)")
    ap.add_argument("--runs", type=int, default=6, help="agent runs replayed")
    ap.add_argument("--budgets", default="4000,8000")
    ap.add_argument("--agent-budgets", default="16000,32000")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--cache", default="", help="cache policy keys, e.g. recall_share=0.4,...")
    ap.add_argument("--methods", default="", help="only these methods (comma-separated)")
    args = ap.parse_args(argv)
    keys = dict(kv.split("=") for kv in args.cache.split(",") if kv)
    cache = replace(CachePolicy(), **{k: float(v) for k, v in keys.items()})
    tok = tokenizer()
    convs, cases, _ = load(DEFAULT_PATH.resolve())
    convs = convs[: args.convs]
    cases = [c for c in cases if c.conv < len(convs)]
    if args.questions and args.questions < len(cases):
        cases = sorted(random.Random(0).sample(cases, args.questions), key=lambda c: c.conv)
    results: dict[str, Any] = {"locomo": {}, "agents": {}}
    for budget in [int(b) for b in args.budgets.split(",") if b]:
        rows: dict[str, Any] = {}
        trims = pick(methods(tok, budget, cache=cache), args.methods)
        for conv in convs:
            for name, tally in replay(chat_requests(conv), trims, tok, budget).items():
                rows.setdefault(name, []).append(tally)
        for name, trim in trims.items():
            merged = Tally()
            for t in rows[name]:
                for k, v in vars(t).items():
                    if isinstance(v, int | float) and k != "prev":
                        setattr(merged, k, getattr(merged, k) + v)
            hits = rec = total = 0
            for case in cases:
                conv = convs[case.conv]
                question = {"role": "user", "content": case.question}
                body = {
                    "model": MODEL,
                    "messages": [{"role": "system", "content": SYSTEM}, *conv.messages, question],
                }
                v, r = evidence(conv, trim(body), case.evidence)
                hits, rec, total = hits + v, rec + r, total + len(case.evidence)
            row = merged.row()
            row["evidence_recall"] = (hits + rec) / max(1, total)
            row["evidence_verbatim"] = hits / max(1, total)
            row["evidence_in_recall"] = rec / max(1, total)
            rows[name] = row
        results["locomo"][str(budget)] = rows
        print_rows(f"LoCoMo, budget {budget}", rows)
    runs = load_runs(args.runs)
    for budget in [int(b) for b in args.agent_budgets.split(",") if b and runs]:
        trims = pick(methods(tok, budget, truncate=True, cache=cache), args.methods)
        totals: dict[str, list[Tally]] = {}
        for run in runs:
            messages = run["messages"]
            steps = [k for k, m in enumerate(messages) if m["role"] == "assistant" and k > 1]
            bodies = [
                {"model": MODEL, "messages": messages[:k], "tools": run["tools"]} for k in steps
            ]
            for name, tally in replay(bodies, trims, tok, budget).items():
                totals.setdefault(name, []).append(tally)
        rows = {}
        for name, ts in totals.items():
            merged = Tally()
            for t in ts:
                for k, v in vars(t).items():
                    if isinstance(v, int | float) and k != "prev":
                        setattr(merged, k, getattr(merged, k) + v)
            rows[name] = merged.row()
        results["agents"][str(budget)] = rows
        print_rows(f"agent runs, budget {budget}", rows)
    meta = {
        "convs": len(convs),
        "questions": len(cases),
        "runs": len(runs),
        "cache_policy": orjson.loads(orjson.dumps(cache)),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps({"meta": meta, **results}, option=orjson.OPT_INDENT_2))
    print(f"wrote {args.out}")


def pick(trims: dict[str, Trim], names: str) -> dict[str, Trim]:
    wanted = [n for n in names.split(",") if n]
    return {k: v for k, v in trims.items() if not wanted or k in wanted}


def print_rows(title: str, rows: dict[str, Any]) -> None:
    print(title)
    print(f"{'method':14}{'reqs':>6}{'trim':>6}{'fit':>6}{'cached':>8}{'cost':>7}"
          f"{'trim:cached':>12}{'cost':>7}{'breaks':>7}{'recall':>8}{'ms':>7}")  # fmt: skip
    for name, r in rows.items():
        print(
            f"{name:14}{r['requests']:>6}{r['trimmed_requests']:>6}{r['fits']:>6.2f}"
            f"{r['cached_share']:>8.3f}{r['effective_cost']:>7.3f}"
            f"{r['trimmed_cached_share']:>12.3f}{r['trimmed_effective_cost']:>7.3f}"
            f"{r['trimmed_uncached_requests']:>7}{r.get('evidence_recall', float('nan')):>8.3f}"
            f"{r['ms_per_request']:>7.1f}"
        )


if __name__ == "__main__":
    main()
