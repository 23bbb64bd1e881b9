"""Plan corpus: every request of the benchmark sets planned, one digest per request.

Usage: python tests/bench/plan_corpus.py --out digests.json [--compare before.json]
       [--only locomo,replay,agents,fuzz] [--fuzz N] [--draws FILE]

Plans, with `proxy.planner.plan_request` only (the façade), the requests the benchmarks
send: LoCoMo's questions at the end of each conversation (2k, 4k, 8k; cache mode, the
per-request plan, relevance off; with the sessions' summaries offered), LoCoMo replayed
turn by turn (4k, cache mode, one term index per conversation as a worker keeps one),
the agent runs at every decision point (8k, 16k, 32k; cache mode and not), and the
planner's property-test corpus (hypothesis, derandomized: the same draws every run) under
policies that vary cache mode, the budget note, overflow and relevance. Each request's
digest covers the forwarded body's bytes, the outcome's figures and the plan report (or
the refusal's message). With `--compare`, prints the requests whose digest changed and
exits 1 if any did: a refactor of the planner must change none.
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from bench_locomo import DEFAULT_PATH as LOCOMO  # noqa: E402
from bench_locomo import MODEL, SYSTEM, load  # noqa: E402

from proxy.errors import ContextLengthExceeded  # noqa: E402
from proxy.planner import ExtraSummary, Kept, Offered, PlanOutcome, plan_request  # noqa: E402
from proxy.policy.model import (  # noqa: E402
    BudgetPolicy,
    CachePolicy,
    HistoryPolicy,
    ModelPolicy,
    Policy,
    ToolsPolicy,
    VisibilityPolicy,
)
from proxy.relevance import TermIndex  # noqa: E402
from proxy.tokens import TokenCounter  # noqa: E402

AGENT_RUNS = ROOT / ".." / "shared" / "data" / "agent-runs" / "trajectories.jsonl"

Case = tuple[str, Callable[[], PlanOutcome]]


def digest(run: Callable[[], PlanOutcome]) -> str:
    """The request's digest: forwarded bytes, figures and report, or the refusal."""
    try:
        out = run()
    except ContextLengthExceeded as exc:
        return "refused:" + hashlib.sha256(exc.message.encode()).hexdigest()[:24]
    figures = (
        out.changed, out.budget, out.context_window, out.tokens_before, out.tokens_after,
        out.dropped, out.truncated, out.summarized, out.deduped, out.trimmed, out.cleared,
        out.problems, out.estimated,
    )  # fmt: skip
    h = hashlib.sha256(orjson.dumps(out.body))
    h.update(orjson.dumps(figures))
    try:
        report = orjson.dumps(out.report.to_json())
    except RuntimeError as exc:  # a refused or failed plan has no report
        report = str(exc).encode()
    h.update(report)
    return h.hexdigest()[:24]


def chat_policy(budget: int, relevance: str = "bm25", cache: bool = True) -> Policy:
    return Policy(
        budget=BudgetPolicy(ratio=1.0, reserve_output=False),
        models={MODEL: ModelPolicy(context_window=budget)},
        history=HistoryPolicy(relevance=relevance),
        cache=CachePolicy(enabled=cache),
    )


def locomo_cases(tok: Any) -> Iterator[Case]:
    convs, cases, _ = load(LOCOMO.resolve())
    system = {"role": "system", "content": SYSTEM}
    for n, case in enumerate(cases):
        conv = convs[case.conv]
        question = {"role": "user", "content": case.question}
        body = {"model": MODEL, "messages": [system, *conv.messages, question]}
        extra = [ExtraSummary(a, b, s, f"s{a}") for a, b, s in conv.sessions]
        for budget in (2000, 4000, 8000):
            for relevance, cache in (("bm25", True), ("bm25", False), ("off", False)):
                policy = chat_policy(budget, relevance, cache)
                yield (
                    f"locomo/{n}/{budget}/{relevance}/{cache}",
                    lambda b=body, p=policy, w=budget: plan_request(b, p, tok, w),
                )
        if n % 4 == 0:  # summaries on offer: a share of the questions, both modes
            for cache in (True, False):
                policy = chat_policy(4000, "bm25", cache)
                yield (
                    f"locomo-sum/{n}/{cache}",
                    lambda b=body, p=policy, e=extra: plan_request(
                        b, p, tok, 4000, offered=Offered(e)
                    ),
                )


def replay_cases(tok: Any) -> Iterator[Case]:
    convs, _, _ = load(LOCOMO.resolve())
    system = {"role": "system", "content": SYSTEM}
    for c, conv in enumerate(convs):
        terms = TermIndex()
        policy = chat_policy(4000)
        for t, m in enumerate(conv.messages):
            if m["role"] != "user":
                continue
            body = {"model": MODEL, "messages": [system, *conv.messages[: t + 1]]}
            yield (
                f"replay/{c}/{t}",
                lambda b=body, p=policy, i=terms: plan_request(b, p, tok, 4000, kept=Kept(i)),
            )


def agent_cases(tok: Any) -> Iterator[Case]:
    rows = [orjson.loads(line) for line in AGENT_RUNS.read_bytes().splitlines()]
    for r, row in enumerate(rows):
        msgs = row["messages"]
        terms = TermIndex()
        for k, m in enumerate(msgs):
            if k < 2 or m.get("role") != "assistant" or not m.get("tool_calls"):
                continue
            body = {"model": MODEL, "messages": msgs[:k], "tools": row["tools"]}
            for budget in (8000, 16000, 32000):
                for cache in (True, False):
                    policy = chat_policy(budget, "bm25", cache)
                    yield (
                        f"agents/{r}/{k}/{budget}/{cache}",
                        lambda b=body, p=policy, w=budget, i=terms: plan_request(
                            b, p, tok, w, kept=Kept(i)
                        ),
                    )


Knobs = tuple[str, str, int, bool, bool, float, int]
Drawn = list[tuple[str, Any, Knobs, int, int, int, bool]]


def fuzz_policy(knobs: Knobs) -> Policy:
    overflow, relevance, keep, cache, note, ratio, tools = knobs
    return Policy(
        budget=BudgetPolicy(ratio=ratio, on_required_overflow=overflow),
        history=HistoryPolicy(keep_recent=keep, relevance=relevance),
        visibility=VisibilityPolicy(prompt_report=note),
        cache=CachePolicy(enabled=cache),
        tools=ToolsPolicy(keep_recent=tools),
    )


def fuzz_cases(count: int, keep: Path | None) -> Iterator[Case]:
    """The property tests' conversations and plain chats, drawn derandomized; with `keep`,
    the draws are read from that file (written there on the first run), so that two trees
    plan the very same inputs (Hypothesis seeds a derandomized run from where its code is)."""
    from tests.planner.chat_strategies import REAL, WORDS

    if keep is not None and keep.exists():
        drawn: Drawn = pickle.loads(keep.read_bytes())
    else:
        drawn = draw_fuzz(count)
        if keep is not None:
            keep.write_bytes(pickle.dumps(drawn))
    counters: dict[str, int] = {}
    for name, msgs, knobs, window, start, span, real in drawn:
        n = counters[name] = counters.get(name, -1) + 1
        policy = fuzz_policy(knobs)
        body = {"model": "m", "messages": msgs}
        tok = REAL if real else WORDS
        extra = [ExtraSummary(start, start + span, "summary text of a span")] if real else []
        yield (
            f"{name}/{n}",
            lambda b=body, p=policy, w=window, t=tok, e=extra: plan_request(
                b, p, t, w, offered=Offered(e)
            ),
        )


def draw_fuzz(count: int) -> Drawn:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.planner.chat_strategies import plain_chats
    from tests.planner.test_planner_properties import conversations

    # The policy's knobs, not the Policy itself (its mappings do not pickle).
    policies = st.tuples(
        st.sampled_from(["reject", "truncate"]),
        st.sampled_from(["bm25", "off"]),
        st.integers(0, 4),
        st.booleans(),
        st.booleans(),
        st.sampled_from([0.8, 0.5, 1.0]),
        st.integers(0, 3),
    )
    settle = settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    drawn: Drawn = []
    for name, chats in (("fuzz-tagged", conversations()), ("fuzz-plain", plain_chats())):
        mine: Drawn = []

        @settle
        @given(chats, policies, st.integers(20, 6000), st.integers(0, 6), st.integers(1, 8))
        def draw(msgs: Any, policy: Knobs, window: int, start: int, span: int) -> None:
            real = len(mine) % 2 == 0  # noqa: B023
            mine.append((name, msgs, policy, window, start, span, real))  # noqa: B023

        draw()
        drawn += mine
    return drawn


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--compare", type=Path)
    ap.add_argument("--only", default="locomo,replay,agents,fuzz")
    ap.add_argument("--fuzz", type=int, default=1500, help="draws per fuzz strategy")
    ap.add_argument("--draws", type=Path, help="the fuzz draws: read if there, else written")
    args = ap.parse_args(argv)
    tok = TokenCounter().for_model(MODEL, Policy())
    sets: dict[str, Callable[[], Iterator[Case]]] = {
        "locomo": lambda: locomo_cases(tok),
        "replay": lambda: replay_cases(tok),
        "agents": lambda: agent_cases(tok),
        "fuzz": lambda: fuzz_cases(args.fuzz, args.draws),
    }
    digests: dict[str, str] = {}
    for name in args.only.split(","):
        start = time.perf_counter()
        before = len(digests)
        for key, run in sets[name]():
            digests[key] = digest(run)
        took = time.perf_counter() - start
        print(f"{name}: {len(digests) - before} requests in {took:.1f} s", flush=True)
    args.out.write_bytes(orjson.dumps(digests, option=orjson.OPT_INDENT_2))
    if args.compare is None:
        return 0
    old = orjson.loads(args.compare.read_bytes())
    changed = [k for k in digests if k in old and old[k] != digests[k]]
    missing = [k for k in old if k not in digests]
    print(f"compared {len(digests)} requests: {len(changed)} changed, {len(missing)} missing")
    for k in changed[:40]:
        print("  changed", k)
    return 1 if changed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
