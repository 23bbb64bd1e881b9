"""Trim quality on every data set: what survives, what fits, what the provider can cache.

Usage: python tests/bench/bench_quality.py [--sets locomo,realmem,...] [--limit N]
       [--methods default,per-request,cached-chats,relevance-off,keep-newest] [--no-write]

Each data set (quality_sets.py) is replayed request by request under each of its budgets
(the default policy's ratio, 0.8 of a context window of budget / 0.8) by each method:
`default` (the proxy's default policy: stable cuts for agents' loops, conversations
planned per request), `per-request` (the same with `cache: {enabled: false}`),
`cached-chats` (`cache: {chats: true}`: conversations cut in steps too), `relevance-off`
(the default with `history.relevance: off`, the same plan without relevance) and
`keep-newest` (the setup, then whole units newest first, as simple trimmers do). For the
requests over the budget it counts: evidence recall (the evidence that survives,
quality_score.py, over the evidence of the scored requests), fits (forwarded prompt within
the budget), setup kept (every message before the first answer forwarded as it came),
refused (400s), coherence (split turns, the previous turn kept, recency inversions:
tests/coherence.py), and on replays the cached share (trimmed prompt tokens that repeat
the previous request's leading messages, as OpenAI caches them) and the billed input cost
relative to per-request planning at OpenAI's and Anthropic's rules (billing.py). For the
agent sets also: the evidence whose strings reach the model from any copy, the same for the
evidence only steps older than the newest three hold, and the results showing a file's text
that were cut, and of those how many not to one run of whole lines (evidence_reading.py).
Writes results/quality.json (the sets run; the others' rows as they were) and the tables in
docs/benchmarks.md: the chat sets' and the agent sets', each when its sets ran.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from bench_cache import cached_tokens  # noqa: E402
from billing import AnthropicCache, openai_cost  # noqa: E402
from evidence_reading import copies, older_only, reached, scattered_file_cuts  # noqa: E402
from procs import write_doc_section  # noqa: E402
from quality_score import (  # noqa: E402
    keep_newest,
    kept_evidence,
    setup_kept,
)
from quality_sets import SETS, Msg, Stream, as_messages_body, setup_length  # noqa: E402
from recalled import recall_once  # noqa: E402

from proxy import anthropic  # noqa: E402
from proxy.errors import ContextLengthExceeded  # noqa: E402
from proxy.planner import Kept, PlanMemo, plan_request  # noqa: E402
from proxy.policy.model import CachePolicy, HistoryPolicy, ModelPolicy, Policy  # noqa: E402
from proxy.relevance import TermIndex  # noqa: E402
from proxy.tokens import TokenCounter  # noqa: E402
from tests.coherence import Coherence, coherence  # noqa: E402

RESULTS = HERE / "results" / "quality.json"
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench_quality: begin -->", "<!-- bench_quality: end -->"
MODEL = "gpt-4o"
BUDGETS = {
    "locomo": (4000, 8000),
    "locomo-tagged": (4000, 8000),
    "realmem": (16000, 32000),
    "tau-airline": (2800, 3500),  # 2,800: most decision points over the budget
    "agent-runs": (16000, 32000),
    "text-agent": (16000, 32000),
    "agent-runs-messages": (16000, 32000),
    "techqa": (3276, 6553),  # windows of 4,096 and 8,192
    "claude-code": (32000,),  # its README's window of 40,000
    "swe-agent": (16000, 32000),
    "swe-agent-text": (16000, 32000),
}
METHODS = ("default", "per-request", "cached-chats", "relevance-off", "keep-newest")
# A method: the forwarded messages for a body, or None when the request is refused.
Method = Callable[[dict[str, Any]], list[Msg] | None]


@dataclass
class Coherent:
    """Coherence counts over the answered trimmed requests (tests/coherence.py)."""

    split: int = 0  # turns split
    with_previous: int = 0  # requests with a history turn
    previous: int = 0  # ... whose previous turn was forwarded
    inverted: int = 0  # requests where one of the newest turns went before an older one
    omitted: int = 0  # ... where one of the newest replies was masked or gone before one

    def add(self, seen: Coherence) -> None:
        self.split += seen.split
        self.with_previous += seen.previous is not None
        self.previous += bool(seen.previous)
        self.inverted += seen.inverted
        self.omitted += seen.newest_omitted


def judged(tok: Any, framed: dict[str, Any], out: Sequence[Msg], budget: int) -> Coherence:
    """How coherent `out` is as the trim of `framed`'s messages. The room the required
    parts leave is the budget less them all: the declared tools (and the request's framing,
    read from `framed`) as much as the setup and the current turn."""
    messages = framed["messages"]
    framing = tok.count_request({**framed, "messages": []})
    return coherence(messages, out, setup_length(messages), budget - framing, tok.count_message)


@dataclass
class Tally(Coherent):
    requests: int = 0
    trimmed: int = 0
    fits: int = 0
    setup: int = 0
    refused: int = 0
    errors: int = 0
    scored: int = 0
    evidence: int = 0
    kept: int = 0
    reachable: int = 0  # kept, or returned by one context_recall call (recalled.py)
    copied: int = 0  # its strings in what the model reads, from any copy (evidence_reading.py)
    older: int = 0  # evidence the newest three steps' outputs do not all hold ...
    older_copied: int = 0  # ... and of it, its strings in what the model reads
    file_cuts: int = 0  # results showing a file's text forwarded cut ...
    scattered: int = 0  # ... not to one run of whole lines of it
    trimmed_tokens: int = 0
    cached: int = 0
    openai: float = 0.0  # billed input cost of the trimmed replayed requests (billing.py)
    anthropic: float = 0.0
    seconds: float = 0.0
    answered: int = 0

    def row(self, replay: bool) -> dict[str, Any]:
        n = max(self.trimmed, 1)
        return {
            **vars(self),
            "recall": round(self.kept / max(self.evidence, 1), 3),
            "reachable_share": round(self.reachable / max(self.evidence, 1), 3),
            "copy_share": round(self.copied / max(self.evidence, 1), 3),
            "older_share": round(self.older_copied / max(self.older, 1), 3),
            "fits_share": round(self.fits / n, 3),
            "setup_share": round(self.setup / n, 3),
            "split_per_request": round(self.split / max(self.answered, 1), 3),
            "previous_share": round(self.previous / max(self.with_previous, 1), 3),
            "cached_share": round(self.cached / max(self.trimmed_tokens, 1), 3) if replay else None,
        }


def planner(
    tok: Any,
    budget: int,
    cache: bool,
    messages: bool = False,
    relevance: str = "bm25",
    chats: bool | None = None,
) -> Callable[[], Method]:
    """A method factory: one term index per stream, as a worker keeps one. `messages`: the
    body is sent as Anthropic's Messages API takes it (converted, read into neutral
    messages, planned, written back as blocks, and read again for scoring: tool results
    come back as the tool messages they were)."""
    policy = Policy(
        models={MODEL: ModelPolicy(context_window=round(budget / 0.8))},
        cache=CachePolicy(enabled=cache, chats=CachePolicy().chats if chats is None else chats),
        history=HistoryPolicy(relevance=relevance),
    )
    window = round(budget / 0.8)

    def make() -> Method:
        kept = Kept(TermIndex(), PlanMemo())  # one per stream, as a worker keeps them

        def run(body: dict[str, Any]) -> list[Msg] | None:
            native = anthropic.is_messages_body(body)  # a Messages body as a client sent it
            sent = body if native or not messages else as_messages_body(body)
            conv = anthropic.to_chat(sent) if messages or native else None
            try:
                outcome = plan_request(conv.body if conv else body, policy, tok, window, kept=kept)
            except ContextLengthExceeded:
                return None
            if conv is None:
                return list(outcome.body["messages"])
            written = anthropic.to_messages(sent, conv, outcome.body["messages"])
            return [dict(m) for m in anthropic.to_chat(written).messages]

        return run

    return make


def run_stream(
    stream: Stream,
    make: Callable[[], Method],
    tok: Any,
    budget: int,
    tally: Tally,
    scored_only: bool = False,
) -> None:
    """Replays one stream; `scored_only`: its scored requests alone (no cached share)."""
    method = make()
    prev: list[Msg] | None = None
    anthropic = AnthropicCache()
    for point in stream.points:
        if scored_only and not point.scored:
            continue
        body = point.body
        messages = body["messages"]
        tally.requests += 1
        if tok.count_request(body) <= budget:
            prev = list(messages)  # forwarded as it came by every method
            if stream.replay:
                anthropic.cost(prev, [tok.count_message(m) for m in prev])  # writes its prefix
            continue
        start = time.perf_counter()
        try:
            out = method(point.native if point.native is not None else body)
        except Exception as exc:  # a bug is counted, not fatal to the run
            print(f"  {stream.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            tally.errors += 1
            out = None
        tally.seconds += time.perf_counter() - start
        tally.trimmed += 1
        if point.scored:
            tally.scored += 1
            tally.evidence += len(point.evidence)
        if out is None:
            tally.refused += 1
            prev = None
            continue
        used = tok.count_request({**body, "messages": out})
        tally.fits += used <= budget
        tally.setup += setup_kept(messages, out)
        tally.answered += 1
        tally.add(judged(tok, body, out, budget))
        cuts, scattered = scattered_file_cuts(messages, out)
        tally.file_cuts += cuts
        tally.scattered += scattered
        if point.scored:
            read = normalized(stream.normalize)
            tally.kept += kept_evidence(read(messages), read(out), point.evidence)
            found, original = copies(read(out)), read(messages)
            tally.copied += reached(found, original, point.evidence)
            older = older_only(original, point.evidence)
            tally.older += len(older)
            tally.older_copied += reached(found, original, older)
            recalled = recall_once(messages, out, point.query, (round(budget / 0.8), used), tok)
            with_recall = [*out, recalled] if recalled is not None else out
            tally.reachable += kept_evidence(read(messages), read(with_recall), point.evidence)
        if stream.replay:
            costs = [tok.count_message(m) for m in out]
            tally.trimmed_tokens += used
            tally.cached += cached_tokens(prev, out, costs)
            tally.openai += openai_cost(prev, out, costs)
            tally.anthropic += anthropic.cost(out, costs)
        prev = out


def chat_of(body: dict[str, Any]) -> dict[str, Any]:
    """A Messages body a client sent as the chat body the proxy plans (others as they are)."""
    if not anthropic.is_messages_body(body):
        return body
    return {**body, "messages": anthropic.to_chat(body).messages}


def normalized(how: Callable[[str], str] | None) -> Callable[[list[Msg]], list[Msg]]:
    """Messages with their text read as the data set reads its evidence (as they are when
    it says nothing)."""
    if how is None:
        return lambda messages: messages
    return lambda messages: [
        {**m, "content": how(m["content"])} if isinstance(m.get("content"), str) else m
        for m in messages
    ]


def run(
    sets: Sequence[str], methods: Sequence[str], limit: int, scored_only: bool = False
) -> dict[str, Any]:
    tok = TokenCounter().for_model(MODEL, Policy())
    results: dict[str, Any] = {}
    for name in sets:
        streams = SETS[name](limit)
        for budget in BUDGETS[name]:
            blocks = name.endswith("-messages")
            makers: dict[str, Callable[[], Method]] = {
                "default": planner(tok, budget, True, blocks),
                "per-request": planner(tok, budget, False, blocks),
                "cached-chats": planner(tok, budget, True, blocks, chats=True),
                "relevance-off": planner(tok, budget, True, blocks, "off"),
                "keep-newest": lambda b=budget: lambda body: keep_newest(chat_of(body), tok, b),
            }
            for method in methods:
                tally = Tally()
                for stream in streams:
                    run_stream(stream, makers[method], tok, budget, tally, scored_only)
                row = tally.row(any(s.replay for s in streams))
                results.setdefault(name, {}).setdefault(str(budget), {})[method] = row
                print(
                    f"{name:12} {budget:>6} {method:12} recall {row['recall']:.3f} "
                    f"reachable {row['reachable_share']:.3f} any-copy {row['copy_share']:.3f} "
                    f"older-only {row['older_share']:.3f} ({row['older']}) "
                    f"file-cuts {row['file_cuts']} scattered {row['scattered']} "
                    f"fits {row['fits_share']:.3f} setup {row['setup_share']:.3f} "
                    f"refused {row['refused']} cached {row['cached_share']} "
                    f"cost {row['openai']:.0f}/{row['anthropic']:.0f} "
                    f"split {row['split_per_request']} prev {row['previous_share']} "
                    f"inverted {row['inverted']} newest-omitted {row['omitted']} "
                    f"({row['trimmed']} trimmed, {row['seconds']:.0f} s)",
                    flush=True,
                )
            relative_costs(results[name][str(budget)])
    return results


def relative_costs(rows: dict[str, Any]) -> None:
    """Each method's billed input cost over the replays relative to per-request planning."""
    base = rows.get("per-request")
    for row in rows.values():
        for provider in ("openai", "anthropic"):
            cost = row[provider] / base[provider] if base and base[provider] else None
            row[f"{provider}_cost"] = None if cost is None else round(cost, 3)


def table(results: dict[str, Any]) -> str:
    lines = [
        "| data set | budget | method | trimmed requests | evidence recall | evidence, any copy | "
        "older-only evidence, any copy | evidence reachable | file text cut (scattered) | fits | "
        "setup kept | refused | split turns / request | previous turn kept | "
        "recency inverted | newest reply omitted | cached share (replays) | "
        "input cost, OpenAI | input cost, Anthropic |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def figure(value: float | None) -> str:
        return "" if value is None else f"{value:.3f}"

    for name, budgets in results.items():
        for budget, methods in budgets.items():
            for method, r in methods.items():
                lines.append(
                    f"| {name} | {int(budget):,} | {method} | {r['trimmed']:,} | "
                    f"{r['recall']:.3f} | {r['copy_share']:.3f} | {r['older_share']:.3f} | "
                    f"{r['reachable_share']:.3f} | {r['file_cuts']} ({r['scattered']}) | "
                    f"{r['fits_share']:.3f} | "
                    f"{r['setup_share']:.3f} | "
                    f"{r['refused']} | {r['split_per_request']:.2f} | "
                    f"{r['previous_share']:.3f} | {r['inverted']} | {r['omitted']} | "
                    f"{figure(r['cached_share'])} | {figure(r.get('openai_cost'))} | "
                    f"{figure(r.get('anthropic_cost'))} |"
                )
    return "\n".join(lines)


# The agent sets (tool loops, text agents, a tool-calling service agent) in a section of
# their own: a run of one group leaves the other's figures as they were measured.
AGENT_SETS = (
    "tau-airline", "agent-runs", "text-agent", "agent-runs-messages", "claude-code",
    "swe-agent", "swe-agent-text",
)  # fmt: skip
AGENT_MARKS = "<!-- bench_quality_agents: begin -->", "<!-- bench_quality_agents: end -->"


def write_doc(results: dict[str, Any], command: str) -> None:
    for marks, heading, agents in (
        ((BEGIN, END), "Trim quality on every data set", False),
        (AGENT_MARKS, "Trim quality on the agent sets", True),
    ):
        rows = {name: r for name, r in results.items() if (name in AGENT_SETS) is agents}
        if rows:
            write_doc_section(DOC, marks, heading, command, table(rows))


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--limit", type=int, default=0, help="streams per data set (0: all)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--scored-only", action="store_true", help="evidence only, no replays")
    args = ap.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    methods = [m for m in args.methods.split(",") if m]
    results = run(sets, methods, args.limit, args.scored_only)
    print(table(results))
    if args.no_write or args.limit or args.scored_only:
        return
    known = orjson.loads(RESULTS.read_bytes()) if RESULTS.exists() else {}
    RESULTS.write_bytes(orjson.dumps({**known, **results}, option=orjson.OPT_INDENT_2))
    write_doc(results, "python tests/bench/bench_quality.py " + " ".join(argv or sys.argv[1:]))


if __name__ == "__main__":
    main()
