"""Trim-quality benchmark: how much of LoCoMo's evidence survives trimming to a budget.

Usage: python tests/bench/bench_locomo.py [PATH/locomo10.json] [--limit N] [--seed S]
       [--no-summaries]

Each LoCoMo conversation becomes a chat-completion request (one message per turn,
speaker_a as user, speaker_b as assistant) and each annotated question (categories 1-4)
its last user message. For each budget, each method trims the request; we count the
evidence turns still present (matched by content: evidence turns are unique in LoCoMo,
and the matcher checks it) and the requests whose prompt fits the budget.
The data (CC BY-NC 4.0) is read in place and never copied into the project.

Summary mode (the "+sum" methods): the planner also gets proxy summaries, as if every
older span had been summarized on an earlier turn (the steady state of a long chat), and
an evidence turn counts as *covered* when it was dropped but a kept summary covers its
span. No LLM is called: "+sum session" uses LoCoMo's own `session_summary` texts, one
span per session; "+sum extract" uses the proxy's own spans (`chunk_turns` turns) with an
extractive stand-in summary (each message's first sentence, cut to a fifth of the span's
tokens). `recall` is the share of a covered evidence turn's content words found in the
summary that covers it: a rough check of whether the summary kept the fact.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from baselines import keep_newest, middle_out, relevance_fill  # noqa: E402

DEFAULT_PATH = ROOT / ".." / "shared" / "data" / "locomo" / "locomo10.json"
RESULTS = Path(__file__).resolve().parent / "results" / "locomo.json"
BUDGETS = (2000, 4000, 8000)
MODEL = "gpt-4o"
SYSTEM = "You are a helpful assistant with a long memory. Answer from the conversation."
_EVIDENCE = re.compile(r"D:?(\d+):0*(\d+)")


@dataclass
class Case:
    conv: int
    question: str
    evidence: list[int]  # indices into the conversation's turns
    category: int


@dataclass
class Conversation:
    messages: list[dict[str, Any]]  # the turns, oldest first
    turn_of: dict[str, int]  # dia_id -> index
    by_content: dict[str, int] = field(default_factory=dict)
    sessions: list[tuple[int, int, str]] = field(default_factory=list)  # start, end, summary


def load(path: Path) -> tuple[list[Conversation], list[Case], int]:
    data = orjson.loads(path.read_bytes())
    convs: list[Conversation] = []
    cases: list[Case] = []
    unmatched = 0
    for ci, sample in enumerate(data):
        c = sample["conversation"]
        role = {c["speaker_a"]: "user", c["speaker_b"]: "assistant"}
        sessions = sorted(
            (k for k, v in c.items() if re.fullmatch(r"session_\d+", k) and isinstance(v, list)),
            key=lambda k: int(k.split("_")[1]),
        )
        messages: list[dict[str, Any]] = []
        turn_of: dict[str, int] = {}
        bounds: list[tuple[int, int, str]] = []
        for key in sessions:
            first = len(messages)
            for turn in c[key]:
                text = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                turn_of[turn["dia_id"]] = len(messages)
                messages.append({"role": role[turn["speaker"]], "content": text})
            summary = (sample.get("session_summary") or {}).get(f"{key}_summary")
            if isinstance(summary, str) and summary and len(messages) > first:
                bounds.append((first, len(messages), summary))
        conv = Conversation(messages, turn_of, sessions=bounds)
        counts: dict[str, int] = {}
        for i, m in enumerate(messages):
            counts[m["content"]] = counts.get(m["content"], 0) + 1
            conv.by_content[m["content"]] = i
        convs.append(conv)
        for qa in sample["qa"]:
            if qa.get("category") not in (1, 2, 3, 4):
                continue
            ids = [f"D{a}:{b}" for a, b in _EVIDENCE.findall(" ".join(qa["evidence"]))]
            ev = sorted({turn_of[i] for i in ids if i in turn_of})
            unmatched += sum(i not in turn_of for i in ids) + (not ids)
            # Content matching is exact only if evidence turns are unique.
            assert all(counts[messages[i]["content"]] == 1 for i in ev)
            if ev:
                cases.append(Case(ci, str(qa["question"]), ev, int(qa["category"])))
    return convs, cases, unmatched


def tokenizer() -> Any:
    """The project's counter when it exists, else tiktoken's o200k with OpenAI's rule."""
    try:
        from proxy.policy.model import Policy
        from proxy.tokens.counter import TokenCounter

        return TokenCounter().for_model(MODEL, Policy())
    except ImportError:
        pass
    spec = importlib.util.find_spec("litellm")
    assert spec and spec.submodule_search_locations
    folder = Path(next(iter(spec.submodule_search_locations)))
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(folder / "litellm_core_utils" / "tokenizers"))
    import tiktoken

    enc = tiktoken.get_encoding("o200k_base")

    class Fallback:
        def count_message(self, m: dict[str, Any]) -> int:
            return 3 + len(enc.encode(m["role"])) + len(enc.encode(m["content"]))

        def count_request_overhead(self, body: dict[str, Any]) -> int:
            return 3

    return Fallback()


Method = Callable[[Conversation, Case, int], list[dict[str, Any]] | None]
# Per conversation: (forwarded summary message text, first and end turn index it covers).
Covers = dict[int, list[tuple[str, int, int]]]
_WORD = re.compile(r"[a-z0-9']{4,}")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def make_methods(
    tok: Any,
    costs: list[list[int]],
    keep_recent: int,
    convs: Sequence[Conversation],
    covers: Covers,
) -> dict[str, Method]:
    system = {"role": "system", "content": SYSTEM}

    def fixed(case: Case) -> int:
        return int(
            tok.count_message(system)
            + tok.count_message({"role": "user", "content": case.question})
            + tok.count_request_overhead({"model": MODEL, "messages": []})
        )

    def by_index(rule: Callable[[Sequence[int], int, int], list[int]]) -> Method:
        def run(conv: Conversation, case: Case, budget: int) -> list[dict[str, Any]]:
            kept = rule(costs[case.conv], fixed(case), budget)
            question = {"role": "user", "content": case.question}
            return [system, *(conv.messages[i] for i in kept), question]

        return run

    methods: dict[str, Method] = {}
    planner = planner_method(tok, system)
    if planner is not None:
        methods["planner bm25"] = planner("bm25")
        methods["planner off"] = planner("off")
        methods["planner bm25 cache"] = planner("bm25", True)  # the default: cache mode
    if covers is not None:
        methods.update(summary_methods(tok, system, convs, covers))
    methods["keep-newest"] = by_index(keep_newest)
    methods["middle-out"] = by_index(middle_out)

    def reference(conv: Conversation, case: Case, budget: int) -> list[dict[str, Any]]:
        texts = [m["content"] for m in conv.messages]
        kept = relevance_fill(
            costs[case.conv], fixed(case), budget, texts, case.question, keep_recent
        )
        question = {"role": "user", "content": case.question}
        return [system, *(conv.messages[i] for i in kept), question]

    methods["bm25 reference"] = reference
    return methods


def planner_method(tok: Any, system: dict[str, Any]) -> Callable[..., Method] | None:
    """Our planner, if proxy.planner.request exists yet: per request, or in cache mode."""
    try:
        from proxy.planner.request import plan_request
        from proxy.policy.model import (
            BudgetPolicy,
            CachePolicy,
            HistoryPolicy,
            ModelPolicy,
            Policy,
        )
    except ImportError:
        return None

    def make(relevance: str, cache: bool = False) -> Method:
        def run(conv: Conversation, case: Case, budget: int) -> list[dict[str, Any]] | None:
            policy = Policy(
                budget=BudgetPolicy(ratio=1.0, reserve_output=False),
                models={MODEL: ModelPolicy(context_window=budget)},
                history=HistoryPolicy(relevance=relevance),
                cache=CachePolicy(enabled=cache),
            )
            question = {"role": "user", "content": case.question}
            body = {"model": MODEL, "messages": [system, *conv.messages, question]}
            result = plan_request(body, policy, tok, budget)
            out = getattr(result, "body", None) or getattr(result, "request", None)
            if out is None and isinstance(result, tuple):
                out = result[0]
            return list(out["messages"]) if out else None

        return run

    return make


def extractive(messages: Sequence[dict[str, Any]], tok: Any) -> str:
    """A stand-in summary: each message's first sentence, cut to a fifth of the span."""
    text = " ".join(_SENTENCE_END.split(m["content"], maxsplit=1)[0] for m in messages)
    limit = max(32, sum(tok.count_message(m) for m in messages) // 5)
    return str(tok.truncate_text(text, limit))


def summary_methods(
    tok: Any, system: dict[str, Any], convs: Sequence[Conversation], covers: Covers
) -> dict[str, Method]:
    """The planner (bm25) with proxy summaries of every older span on offer; fills `covers`."""
    try:
        from proxy.planner.request import SUMMARY_PREFIX, ExtraSummary, Offered, plan_request
        from proxy.policy.model import (
            BudgetPolicy,
            CachePolicy,
            ModelPolicy,
            Policy,
            SummaryPolicy,
        )
        from proxy.summaries.spans import chunk_spans, settings_tag
    except ImportError:
        return {}
    chunk = SummaryPolicy().chunk_turns
    offers: dict[str, list[list[Any]]] = {"session": [], "extract": []}
    for ci, conv in enumerate(convs):
        # Message i of the conversation is message i + 1 of the request (after the system one).
        session = [ExtraSummary(a + 1, b + 1, text, f"s{a}") for a, b, text in conv.sessions]
        body = [system, *conv.messages, {"role": "user", "content": "?"}]
        spans = chunk_spans(body, chunk, settings_tag(MODEL, SummaryPolicy().max_tokens))
        extract = [
            ExtraSummary(sp.start, sp.end, extractive(body[sp.start : sp.end], tok), sp.key)
            for sp in spans
        ]
        for name, extras in (("session", session), ("extract", extract)):
            offers[name].append(extras)
            covers.setdefault(ci, []).extend(
                (SUMMARY_PREFIX + e.text, e.start - 1, e.end - 1) for e in extras
            )

    def make(name: str) -> Method:
        def run(conv: Conversation, case: Case, budget: int) -> list[dict[str, Any]]:
            policy = Policy(
                budget=BudgetPolicy(ratio=1.0, reserve_output=False),
                models={MODEL: ModelPolicy(context_window=budget)},
                cache=CachePolicy(enabled=False),  # how summaries stand in, per request
            )
            question = {"role": "user", "content": case.question}
            body = {"model": MODEL, "messages": [system, *conv.messages, question]}
            extra = offers[name][case.conv]
            return list(
                plan_request(body, policy, tok, budget, offered=Offered(extra)).body["messages"]
            )

        return run

    return {"planner+sum session": make("session"), "planner+sum extract": make("extract")}


def covered(
    conv: Conversation,
    cases_conv: int,
    out: Sequence[dict[str, Any]],
    present: set[Any],
    evidence: Sequence[int],
    covers: Covers,
) -> tuple[int, list[float]]:
    """Evidence turns dropped but covered by a kept summary, and each one's word recall."""
    kept: list[tuple[str, int, int]] = []
    for m in out:
        content = m.get("content")
        if m.get("role") != "system" or not isinstance(content, str):
            continue
        cut = content.removesuffix("\n[…truncated]")
        for text, start, end in covers.get(cases_conv, ()):
            if text.startswith(cut) and len(cut) > 40:  # a truncated summary still covers
                kept.append((cut, start, end))
                break
    hits, recalls = 0, []
    for i in evidence:
        if i in present:
            continue
        summary = next((t for t, a, b in kept if a <= i < b), None)
        if summary is None:
            continue
        hits += 1
        said = conv.messages[i]["content"].split(":", 1)[-1].lower()
        words = set(_WORD.findall(said))
        found = set(_WORD.findall(summary.lower()))
        recalls.append(len(words & found) / len(words) if words else 0.0)
    return hits, recalls


def recalled(conv: Conversation, out: Sequence[dict[str, Any]]) -> set[int | None]:
    """Turns brought back inside cache mode's recall message (one "Speaker: text" line each,
    which is how LoCoMo's turns are written already)."""
    head = "[context-proxy: recalled from earlier in this conversation]"
    lines = [
        line
        for m in out
        if isinstance(m.get("content"), str) and m["content"].startswith(head)
        for line in m["content"].split("\n")[1:]
    ]
    return {conv.by_content.get(line) for line in lines}


def evaluate(
    convs: Sequence[Conversation],
    cases: Sequence[Case],
    methods: dict[str, Method],
    tok: Any,
    covers: Covers | None = None,
) -> dict[str, dict[str, dict[str, Any]]]:
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for name, method in methods.items():
        results[name] = {}
        for budget in BUDGETS:
            kept_ev = total_ev = fits = all_kept = cov_ev = 0
            recalls: list[float] = []
            by_cat: dict[int, list[int]] = {}
            start = time.perf_counter()
            for case in cases:
                conv = convs[case.conv]
                out = method(conv, case, budget) or []
                present = {conv.by_content.get(m.get("content")) for m in out}  # type: ignore[arg-type]
                present |= recalled(conv, out)
                hit = sum(i in present for i in case.evidence)
                kept_ev += hit
                if covers:
                    n, r = covered(conv, case.conv, out, present, case.evidence, covers)
                    cov_ev += n
                    recalls += r
                cat = by_cat.setdefault(case.category, [0, 0])
                cat[0] += hit
                cat[1] += len(case.evidence)
                total_ev += len(case.evidence)
                all_kept += hit == len(case.evidence)
                tokens = sum(tok.count_message(m) for m in out) + tok.count_request_overhead(
                    {"model": MODEL, "messages": out}
                )
                fits += tokens <= budget
            results[name][str(budget)] = {
                "evidence_kept": kept_ev / total_ev,
                "evidence_covered": cov_ev / total_ev,
                "evidence_kept_or_covered": (kept_ev + cov_ev) / total_ev,
                "covered_word_recall": sum(recalls) / len(recalls) if recalls else None,
                "questions_all_evidence": all_kept / len(cases),
                "within_budget": fits / len(cases),
                "ms_per_request": 1000 * (time.perf_counter() - start) / len(cases),
                "evidence_kept_by_category": {
                    str(k): round(a / b, 4) for k, (a, b) in sorted(by_cat.items())
                },
            }
    return results


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH)
    ap.add_argument("--limit", type=int, default=0, help="sample N questions (fixed seed)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep-recent", type=int, default=6)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--no-summaries", action="store_true", help="skip the +sum methods")
    args = ap.parse_args(argv)
    convs, cases, unmatched = load(args.path.resolve())
    if args.limit and args.limit < len(cases):
        cases = sorted(random.Random(args.seed).sample(cases, args.limit), key=lambda c: c.conv)
    tok = tokenizer()
    costs = [[tok.count_message(m) for m in c.messages] for c in convs]
    sizes = [sum(c) for c in costs]
    print(
        f"{len(convs)} conversations ({min(sizes)}-{max(sizes)} tokens), {len(cases)} "
        f"questions, {sum(len(c.evidence) for c in cases)} evidence turns "
        f"({unmatched} evidence ids unmatched)"
    )
    covers: Covers = {}
    methods = make_methods(
        tok,
        costs,
        args.keep_recent,
        convs,
        None if args.no_summaries else covers,  # type: ignore[arg-type]
    )
    results = evaluate(convs, cases, methods, tok, covers)
    header = "method".ljust(20) + "".join(
        f"{'ev@' + str(b // 1000) + 'k':>9}{'+cov':>7}{'recall':>7}{'fit':>6}" for b in BUDGETS
    )
    print(header)
    for name, row in results.items():
        cells = ""
        for b in BUDGETS:
            r = row[str(b)]
            recall = r["covered_word_recall"]
            cells += f"{r['evidence_kept']:>9.3f}{r['evidence_covered']:>7.3f}"
            cells += f"{recall:>7.2f}" if recall is not None else f"{'-':>7}"
            cells += f"{r['within_budget']:>6.2f}"
        print(name.ljust(20) + cells)
    print("ev: evidence turns kept verbatim; +cov: dropped but covered by a kept summary;")
    print("recall: share of a covered turn's content words in its summary")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"questions": len(cases), "limit": args.limit, "seed": args.seed, "budgets": BUDGETS}
    args.out.write_bytes(
        orjson.dumps({"meta": meta, "results": results}, option=orjson.OPT_INDENT_2)
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
