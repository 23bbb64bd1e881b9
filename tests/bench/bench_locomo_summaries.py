"""LoCoMo with one summary per session sent by the client as tagged system messages.

Usage: python tests/bench/bench_locomo_summaries.py [PATH/locomo10.json] [--limit N]
       [--seed S] [--place start|top] [--budgets 2000,4000,8000] [--out FILE]

The requests are bench_locomo.py's (one message per turn, each question as the last user
message), tagged the way a client with its own memory would send them (seed 004): every
turn of session N carries `x_context: {cluster: "session_N"}`, and LoCoMo's own
`session_summary` of session N is a system message
`{"role": "system", "content": summary, "x_context": {"section": "conversation_summary",
"summary_of": "session_N"}}`.

Where the summaries go (`--place`): `start` (the default) puts each one just before its
session's first turn. That keeps the conversation in time order, and it is what a client
that writes a summary when a session ends can send without disturbing the prompt it sent
before: the new summary lands after every earlier session, so the provider's prompt cache
still holds the prefix up to it. `top` puts all of them right after the system prompt
(memory-style), for comparison: each new summary then changes the prompt from the top.

Methods: `tagged` (the cluster tags, no summaries: the same benchmark without them) and
`tagged+sum` (tags and summaries), both proxy.planner.plan_request with the default
policy at budget == window (ratio 1.0, no output reserve, as in bench_locomo.py).
Per budget: `refused` (400 context_length_exceeded: the issue-18 bug when summaries are
required), `errors`, `fits` (answered and prompt tokens <= budget, proxy.tokens), `kept`
(evidence turns forwarded verbatim), `covered` (evidence turns dropped whose session's
summary is forwarded, whole or truncated), and `recall` = (kept + covered / 2) / evidence
turns; a refused request keeps nothing.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_locomo import DEFAULT_PATH, MODEL, SYSTEM, Case, Conversation, load, recalled, tokenizer

from proxy.errors import ContextLengthExceeded
from proxy.planner import plan_request
from proxy.policy.model import BudgetPolicy, ModelPolicy, Policy

RESULTS = Path(__file__).resolve().parent / "results" / "locomo_summaries.json"
BUDGETS = (2000, 4000, 8000)
TRUNCATED = "[…truncated]"
Msg = dict[str, Any]


def tagged(conv: Conversation, place: str, summaries: bool) -> list[Msg]:
    """The conversation's turns with cluster tags, and its session summaries if asked."""
    out: list[Msg] = []
    notes: list[Msg] = []
    for n, (start, end, summary) in enumerate(conv.sessions, 1):
        cluster = f"session_{n}"
        note = {
            "role": "system",
            "content": summary,
            "x_context": {"section": "conversation_summary", "summary_of": cluster},
        }
        if summaries and place == "start":
            out.append(note)
        notes.append(note)
        out += [{**m, "x_context": {"cluster": cluster}} for m in conv.messages[start:end]]
    return notes + out if summaries and place == "top" else out


def summary_kept(out: Sequence[Msg], conv: Conversation) -> set[int]:
    """Indices of the sessions whose summary is in the forwarded messages."""
    first = {text[:200]: n for n, (_, _, text) in enumerate(conv.sessions)}
    kept: set[int] = set()
    for m in out:
        content = m.get("content")
        if m.get("role") != "system" or not isinstance(content, str) or content == SYSTEM:
            continue
        cut = content.removesuffix(TRUNCATED).rstrip()
        n = first.get(cut[:200])
        if n is None:  # truncated under 200 characters: look for the summary it starts
            n = next((i for i, (_, _, t) in enumerate(conv.sessions) if t.startswith(cut)), None)
        if n is not None and len(cut) > 40:
            kept.add(n)
    return kept


def evaluate(
    convs: Sequence[Conversation], cases: Sequence[Case], budgets: Sequence[int], place: str
) -> dict[str, dict[str, dict[str, Any]]]:
    tok = tokenizer()
    system = {"role": "system", "content": SYSTEM}
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for name, summaries in (("tagged", False), ("tagged+sum", True)):
        bodies = [tagged(c, place, summaries) for c in convs]
        for budget in budgets:
            policy = Policy(
                budget=BudgetPolicy(ratio=1.0, reserve_output=False),
                models={MODEL: ModelPolicy(context_window=budget)},
            )
            t = {"questions": 0, "refused": 0, "errors": 0, "fits": 0}
            t |= {"evidence": 0, "kept": 0, "covered": 0, "summaries_kept": 0}
            start = time.perf_counter()
            for case in cases:
                conv = convs[case.conv]
                question = {"role": "user", "content": case.question}
                body = {"model": MODEL, "messages": [system, *bodies[case.conv], question]}
                t["questions"] += 1
                t["evidence"] += len(case.evidence)
                try:
                    out = list(plan_request(body, policy, tok, budget).body["messages"])
                except ContextLengthExceeded:
                    t["refused"] += 1
                    continue
                except Exception:  # a bug: counted, the run goes on
                    t["errors"] += 1
                    continue
                t["fits"] += tok.count_request({"model": MODEL, "messages": out}) <= budget
                present = {conv.by_content.get(m.get("content")) for m in out}
                present |= recalled(conv, out)  # cache mode's recall message
                sessions = summary_kept(out, conv)
                t["summaries_kept"] += len(sessions)
                for i in case.evidence:
                    if i in present:
                        t["kept"] += 1
                    elif any(
                        s <= i < e for n, (s, e, _) in enumerate(conv.sessions) if n in sessions
                    ):
                        t["covered"] += 1
            n = max(t["questions"], 1)
            results.setdefault(name, {})[str(budget)] = {
                **t,
                "fits_share": t["fits"] / n,
                "evidence_kept": t["kept"] / max(t["evidence"], 1),
                "recall": (t["kept"] + t["covered"] / 2) / max(t["evidence"], 1),
                "summaries_per_request": t["summaries_kept"] / n,
                "ms_per_request": round(1000 * (time.perf_counter() - start) / n, 2),
            }
    return results


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH)
    ap.add_argument("--limit", type=int, default=0, help="sample N questions (fixed seed)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--place", choices=("start", "top"), default="start")
    ap.add_argument("--budgets", default=",".join(str(b) for b in BUDGETS))
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    convs, cases, _ = load(args.path.resolve())
    if args.limit and args.limit < len(cases):
        cases = sorted(random.Random(args.seed).sample(cases, args.limit), key=lambda c: c.conv)
    budgets = [int(b) for b in args.budgets.split(",")]
    results = evaluate(convs, cases, budgets, args.place)
    print(f"{len(cases)} questions; summaries placed at session {args.place}; budget == window")
    cols = ("refused", "errors", "fits_share", "evidence_kept", "recall", "summaries_per_request")
    print("method       budget" + "".join(f"{c:>23}" for c in cols))
    for name, row in results.items():
        for budget, r in row.items():
            cells = "".join(
                f"{r[c]:>23.3f}" if isinstance(r[c], float) else f"{r[c]:>23}" for c in cols
            )
            print(f"{name:<12} {budget:>6}{cells}")
    print("recall: evidence turns kept, plus half of those dropped whose session summary is kept")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"questions": len(cases), "limit": args.limit, "seed": args.seed, "place": args.place}
    args.out.write_bytes(
        orjson.dumps({"meta": meta, "results": results}, option=orjson.OPT_INDENT_2)
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
