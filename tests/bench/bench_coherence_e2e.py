"""Coherence end to end: every chat and agent set of bench_quality.py replayed through the
proxy.

Usage: python tests/bench/bench_coherence_e2e.py [--sets locomo,...] [--limit N] [--no-write]

bench_quality.py plans in process; here each request goes through `context-proxy`'s server
over HTTP as a client sends it (the default policy, a window of budget / 0.8), to a fake
upstream served on a loopback port that records what it was sent. For every request the
proxy found over the budget (its `x-context-tokens-before` header), the forwarded messages are read as bench_quality.py reads them
(tests/coherence.py): split turns, the previous turn kept with its reply's text, recency
inverted and newest reply omitted (the room the required parts leave measured with the
forwarded request's own tools, the proxy's recall tool among them when it declared it);
and whether it fits (the proxy's `x-context-tokens-after` header against the budget) and
the evidence that survived, read as bench_quality.py reads it (kept as it came or cut with
its strings; its strings in what the model reads from any copy; the same for the evidence
only steps older than the newest three hold: evidence_reading.py), and how many results
showing a file's text were cut, and how many of those not to one run of whole lines. The
agent sets are sent as chat bodies (claude-code as the chat form of its Messages bodies).
Writes results/coherence_e2e.json (the sets run; the others' rows as they were) and its
sections in docs/benchmarks.md (the chat sets', the agent sets').
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from bench_quality import BUDGETS, MODEL, Coherent, judged, normalized  # noqa: E402
from evidence_reading import copies, older_only, reached, scattered_file_cuts  # noqa: E402
from procs import write_doc_section  # noqa: E402
from quality_score import kept_evidence  # noqa: E402
from quality_sets import SETS  # noqa: E402

from proxy.policy.model import Policy  # noqa: E402
from proxy.server.app.app import create_app  # noqa: E402
from proxy.server.core.settings import Settings  # noqa: E402
from proxy.tokens import TokenCounter  # noqa: E402
from tests.conftest import serve  # noqa: E402
from tests.fake_upstream import FakeUpstream  # noqa: E402

CHAT_SETS = ("locomo", "locomo-tagged", "realmem", "tau-airline", "techqa")
AGENT_SETS = ("agent-runs", "text-agent", "swe-agent", "swe-agent-text", "claude-code")
RESULTS = HERE / "results" / "coherence_e2e.json"
DOC = ROOT / "docs" / "benchmarks.md"
MARKS = "<!-- coherence_e2e: begin -->", "<!-- coherence_e2e: end -->"
AGENT_MARKS = "<!-- coherence_e2e_agents: begin -->", "<!-- coherence_e2e_agents: end -->"


@dataclass
class Tally(Coherent):
    requests: int = 0
    trimmed: int = 0
    answered: int = 0  # status 200
    fits: int = 0
    evidence: int = 0
    kept: int = 0
    copied: int = 0
    older: int = 0
    older_copied: int = 0
    file_cuts: int = 0
    scattered: int = 0

    def row(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "trimmed": self.trimmed,
            "answered_share": round(self.answered / max(self.requests, 1), 3),
            "fits_share": round(self.fits / max(self.trimmed, 1), 3),
            "split": self.split,
            "previous_share": round(self.previous / max(self.with_previous, 1), 3),
            "inverted": self.inverted,
            "omitted": self.omitted,
            "recall": round(self.kept / max(self.evidence, 1), 3),
            "copy_share": round(self.copied / max(self.evidence, 1), 3),
            "older_share": round(self.older_copied / max(self.older, 1), 3),
            "file_cuts": self.file_cuts,
            "scattered": self.scattered,
        }


def replay(name: str, budget: int, limit: int, tok: Any, workdir: Path) -> Tally:
    """One data set at one budget through a proxy of its own (a fresh worker's memory)."""
    policies = workdir / f"policies-{name}-{budget}"
    policies.mkdir()
    window = round(budget / 0.8)
    (policies / "default.yaml").write_text(f"models:\n  {MODEL}: {{context_window: {window}}}\n")
    fake = FakeUpstream()
    tally = Tally()
    with serve(fake.app()) as upstream_url:
        settings = Settings(
            policies=str(policies),
            upstream=upstream_url + "/v1",
            usage_log=str(workdir / f"usage-{name}-{budget}.jsonl"),
            watch_policies=False,
        )
        with serve(create_app(settings)) as proxy_url, httpx.Client(timeout=120) as client:
            for stream in SETS[name](limit):
                for point in stream.points:
                    body = {**point.body, "model": MODEL}  # claude-code's bodies name theirs
                    fake.requests.clear()
                    reply = client.post(
                        proxy_url + "/v1/chat/completions",
                        content=orjson.dumps(body),
                        headers={"authorization": "Bearer sk-client"},
                    )
                    tally.requests += 1
                    tally.answered += reply.status_code == 200
                    if reply.status_code != 200 or not fake.requests:
                        continue
                    if int(reply.headers.get("x-context-tokens-before", "0")) <= budget:
                        continue  # within the budget: forwarded as it came (tags aside)
                    sent = fake.requests[-1].json()
                    messages, out = body["messages"], sent["messages"]
                    tally.trimmed += 1
                    after = int(reply.headers.get("x-context-tokens-after", "0"))
                    tally.fits += after <= budget
                    # Framed as forwarded: its tools, the proxy's recall tool among them.
                    tally.add(judged(tok, {**sent, "messages": messages}, out, budget))
                    cuts, scattered = scattered_file_cuts(messages, out)
                    tally.file_cuts += cuts
                    tally.scattered += scattered
                    if point.scored:
                        read = normalized(stream.normalize)
                        tally.evidence += len(point.evidence)
                        tally.kept += kept_evidence(read(messages), read(out), point.evidence)
                        found, original = copies(read(out)), read(messages)
                        tally.copied += reached(found, original, point.evidence)
                        older = older_only(original, point.evidence)
                        tally.older += len(older)
                        tally.older_copied += reached(found, original, older)
    return tally


def table(results: dict[str, Any]) -> str:
    lines = [
        "| data set | budget | requests | trimmed | answered | fits | split turns | "
        "previous turn kept | recency inverted | newest reply omitted | evidence recall | "
        "evidence, any copy | older-only evidence, any copy | file text cut (scattered) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, budgets in results.items():
        for budget, r in budgets.items():
            lines.append(
                f"| {name} | {int(budget):,} | {r['requests']:,} | {r['trimmed']:,} | "
                f"{r['answered_share']:.3f} | {r['fits_share']:.3f} | {r['split']} | "
                f"{r['previous_share']:.3f} | {r['inverted']} | {r['omitted']} | "
                f"{r['recall']:.3f} | {r['copy_share']:.3f} | {r['older_share']:.3f} | "
                f"{r['file_cuts']} ({r['scattered']}) |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sets", default=",".join(CHAT_SETS + AGENT_SETS))
    ap.add_argument("--limit", type=int, default=0, help="streams per data set (0: all)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    tok = TokenCounter().for_model(MODEL, Policy())
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in [s for s in args.sets.split(",") if s]:
            for budget in BUDGETS[name]:
                start = time.perf_counter()
                row = replay(name, budget, args.limit, tok, Path(tmp)).row()
                results.setdefault(name, {})[str(budget)] = row
                print(f"{name:14} {budget:>6} {row} ({time.perf_counter() - start:.0f} s)")
    print(table(results))
    if args.no_write or args.limit:
        return
    known = orjson.loads(RESULTS.read_bytes()) if RESULTS.exists() else {}
    RESULTS.write_bytes(orjson.dumps({**known, **results}, option=orjson.OPT_INDENT_2))
    command = "python tests/bench/bench_coherence_e2e.py " + " ".join(argv or sys.argv[1:])
    # Chat and agent sets each in a section of their own: a run of one group leaves the
    # other's figures as they were measured.
    for marks, heading, group in (
        (MARKS, "Coherence end to end", CHAT_SETS),
        (AGENT_MARKS, "Coherence end to end: agent sets", AGENT_SETS),
    ):
        rows = {name: r for name, r in results.items() if name in group}
        if rows:
            write_doc_section(DOC, marks, heading, command, table(rows))


if __name__ == "__main__":
    main()
