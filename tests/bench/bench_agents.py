"""Agent-run benchmark: replays coding-agent runs at their decision points under a budget.

Usage: python tests/bench/bench_agents.py [PATH/trajectories.jsonl] [--budgets 8000,16000,32000]
       [--limit N] [--min-len 8] [--out FILE]

Data: the 20 mini-swe-agent runs in ../shared/data/agent-runs/ (read in place, never
copied). Decision point k of a run is the request the agent sent before its k-th `bash`
call: every message before that assistant message, with the run's `tools`, model gpt-4o
(o200k). Budget: the policy's budget ratio is 1.0 with no output reserve and the model's
context_window is the budget itself, so budget == window (as bench_locomo.py does).
Only decision points whose request is over the budget count.

Evidence of decision point k. The *keys* of step k's command (the `command` argument of
its `bash` call) are: (a) file paths: words with a `/`, or ending in a source/doc extension
(`.py`, `.rst`, `.txt`, ...; see _EXT), without a leading `./` or `/testbed/`, and their
base names; (b) code identifiers in the rest of the command: `[A-Za-z_]\\w*` with an
inner underscore or an inner capital (snake_case, CamelCase), so plain words such as
`backends` or `timezone` are not keys; (c) the command's lines, stripped, of >= 20
characters, except imports, comments, print calls and one-word lines. (a) and (b) only
when >= MIN_LEN (`--min-len`, default 8) characters. A key is trivial, and ignored, when
it is in STOP (dunder names, builtin exception names, `testbed`) or occurs in more than
half the request's tool results (when it has 4 or more). The *evidence* of k is the set
of the request's tool results (role `tool`) whose content holds at least one non-trivial
key; those keys are the result's *repeated strings*. A result *survives* in the forwarded
request when its tool message (same tool_call_id) is there and is not a cleared
placeholder (`[context-proxy: ...`), and its content is either unchanged or still holds
every repeated string (a truncated result that kept what the command needs).
Recall = surviving evidence / evidence, summed over decision points; a refused or errored
request keeps nothing (0). `recall_old` is the same over evidence outside the newest
KEEP_RECENT exchanges (which every method keeps whenever it answers).

Methods: `planner` is proxy.planner.plan_request with the default policy (so whatever
the planner does today: a refusal counts as not answered); `keep-newest` keeps the
system prompt and the task (first user message) and then whole exchanges (an assistant
message with its tool results, or a lone message) newest first, stopping at the first
that does not fit; `oracle` knows the evidence (see its docstring): a reference, not a
method. Checks per answered request: fits (prompt tokens <= budget counted
with proxy.tokens), tool calls and results paired, the last user message and the newest
KEEP_RECENT exchanges byte-identical (orjson of each message). `budget_used`: the mean share
of the budget an answered request fills (well under 1: the method trims more than it must).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from proxy.errors import ContextLengthExceeded  # noqa: E402
from proxy.planner import plan_request  # noqa: E402
from proxy.planner.cache.agent_recall import RECALL_TOOLS_HEAD  # noqa: E402
from proxy.policy.model import BudgetPolicy, CachePolicy, ModelPolicy, Policy  # noqa: E402
from proxy.tokens import TokenCounter  # noqa: E402

DEFAULT_PATH = ROOT / ".." / "shared" / "data" / "agent-runs" / "trajectories.jsonl"
RESULTS = Path(__file__).resolve().parent / "results" / "agents.json"
MODEL = "gpt-4o"
KEEP_RECENT = 3
CLEARED = "[context-proxy:"
_EXT = "py|pyi|txt|rst|cfg|toml|ini|json|yaml|yml|html|js|css|sh|md|po|sql|diff|patch|log"
_PATH = re.compile(rf"(?:[\w.-]*/)+[\w.-]*[A-Za-z]\w*|[\w-]+(?:\.[\w-]+)*\.(?:{_EXT})\b")
_IDENT = re.compile(r"[A-Za-z_]\w*")
# Code-like: an inner underscore (snake_case) or an inner capital (CamelCase, camelCase).
_CODE = re.compile(r".[A-Za-z0-9]*(?:_[A-Za-z0-9]|[a-z0-9][A-Z])")
_TRIVIAL_LINE = re.compile(r"(?:import |from |#|print\(|EOF|cd |\S+$)")
_ERRORS = ("type", "value", "key", "attribute", "import", "index", "runtime", "assertion", "name")
STOP = frozenset(
    (
        "testbed",
        "__main__",
        "__init__",
        "__name__",
        "__file__",
        "exception",
        *(e + "error" for e in _ERRORS),
    )
)
Msg = dict[str, Any]
Evidence = dict[str, set[str]]  # tool_call_id -> the repeated strings it holds


def load(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def command_of(message: Msg) -> str | None:
    calls = message.get("tool_calls") or []
    if message.get("role") != "assistant" or not calls:
        return None
    try:
        args = orjson.loads(calls[0]["function"]["arguments"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    command = args.get("command") if isinstance(args, dict) else None
    return command if isinstance(command, str) else None


def keys_of(command: str, min_len: int, stop: frozenset[str]) -> set[str]:
    keys: set[str] = set()
    for found in _PATH.findall(command):
        path = found.removeprefix("./").removeprefix("/testbed/").rstrip("./")
        keys.update(k for k in (path, path.rsplit("/", 1)[-1]) if len(k) >= min_len)
    rest = _PATH.sub(" ", command)
    keys.update(w for w in _IDENT.findall(rest) if len(w) >= min_len and _CODE.match(w))
    lines = (line.strip() for line in command.splitlines())
    keys.update(x for x in lines if len(x) >= 20 and not _TRIVIAL_LINE.match(x))
    return {k for k in keys if k.lower() not in stop}


def evidence(messages: Sequence[Msg], command: str, min_len: int) -> dict[str, set[str]]:
    """tool_call_id -> the repeated strings, for each evidence result of this request."""
    results = [m for m in messages if m.get("role") == "tool" and isinstance(m.get("content"), str)]
    keys = keys_of(command, min_len, STOP)
    if len(results) >= 4:
        keys = {k for k in keys if sum(k in r["content"] for r in results) * 2 <= len(results)}
    out: dict[str, set[str]] = {}
    for r in results:
        hit = {k for k in keys if k in r["content"]}
        if hit:
            out[r["tool_call_id"]] = hit
    return out


def exchanges(messages: Sequence[Msg], start: int) -> list[list[int]]:
    """Index groups from `start`: an assistant message with its tool results, or one message."""
    groups: list[list[int]] = []
    for i in range(start, len(messages)):
        if messages[i].get("role") == "tool" and groups:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def protected(messages: Sequence[Msg]) -> list[Msg]:
    """The last user message and the newest KEEP_RECENT tool exchanges after it."""
    last = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    calls = [g for g in exchanges(messages, last + 1) if messages[g[0]].get("tool_calls")]
    return [messages[last], *(messages[i] for g in calls[-KEEP_RECENT:] for i in g)]


def recent(newest: Sequence[Msg]) -> set[str]:
    return {m["tool_call_id"] for m in newest if m.get("role") == "tool"}


def paired(messages: Sequence[Msg]) -> bool:
    open_ids: set[str] = set()
    for m in messages:
        if m.get("role") == "tool":
            if m.get("tool_call_id") not in open_ids:
                return False
            open_ids.discard(m["tool_call_id"])
        else:
            if open_ids:
                return False  # a call whose results did not all follow it
            open_ids = {c["id"] for c in m.get("tool_calls") or ()}
    return not open_ids


def keep_newest(body: dict[str, Any], tok: Any, budget: int, ev: Evidence) -> list[Msg]:
    messages = body["messages"]
    task = next(i for i, m in enumerate(messages) if m.get("role") == "user")
    head = list(messages[: task + 1])
    room = budget - tok.count_request({**body, "messages": head})
    kept: list[int] = []
    for group in reversed(exchanges(messages, task + 1)):
        cost = sum(tok.count_message(messages[i]) for i in group)
        if cost > room:
            break
        room -= cost
        kept[:0] = group
    return head + [messages[i] for i in kept]


def oracle(body: dict[str, Any], tok: Any, budget: int, ev: Evidence) -> list[Msg]:
    """A reference that knows the next command: system prompt, task, the protected
    messages, then the exchanges holding evidence, then the rest, each newest first and
    whole, skipping what does not fit. An upper mark for whole-message trimming."""
    messages = body["messages"]
    task = next(i for i, m in enumerate(messages) if m.get("role") == "user")
    head = list(messages[: task + 1])
    room = budget - tok.count_request({**body, "messages": head})
    newest = {id(m) for m in protected(messages)}
    groups = exchanges(messages, task + 1)[::-1]

    def rank(g: list[int]) -> int:
        if any(id(messages[i]) in newest for i in g):
            return 0
        return 1 if any(messages[i].get("tool_call_id") in ev for i in g) else 2

    kept: list[int] = []
    for group in sorted(groups, key=rank):  # stable: newest first within a rank
        cost = sum(tok.count_message(messages[i]) for i in group)
        if cost <= room:
            room -= cost
            kept += group
    return head + [messages[i] for i in sorted(kept)]


def required_over(body: dict[str, Any], tok: Any, budget: int) -> bool:
    """Whether the system prompt and the protected messages alone exceed the budget."""
    messages = body["messages"]
    keep = [m for m in messages if m.get("role") == "system"] + protected(messages)
    return bool(tok.count_request({**body, "messages": keep}) > budget)


def planner(
    body: dict[str, Any], tok: Any, budget: int, ev: Evidence, cache: bool = False
) -> list[Msg] | str:
    policy = Policy(
        budget=BudgetPolicy(ratio=1.0, reserve_output=False),
        models={MODEL: ModelPolicy(context_window=budget)},
        cache=CachePolicy(enabled=cache),
    )
    try:
        return list(plan_request(body, policy, tok, budget).body["messages"])
    except ContextLengthExceeded:
        return "refused"
    except Exception as exc:  # a bug is counted, not fatal to the run
        return f"error: {type(exc).__name__}"


def cache_planner(body: dict[str, Any], tok: Any, budget: int, ev: Evidence) -> list[Msg] | str:
    """The planner with cache-stable cuts (cache: {enabled: true}, its other defaults)."""
    return planner(body, tok, budget, ev, cache=True)


def survives(original: str, forwarded: Msg | None, repeated: set[str]) -> bool:
    if forwarded is None:
        return False
    content = forwarded.get("content")
    if not isinstance(content, str) or content.startswith(CLEARED):
        return False
    return content == original or all(k in content for k in repeated)


def score(
    body: dict[str, Any], out: list[Msg], ev: dict[str, set[str]], tok: Any, budget: int
) -> dict[str, Any]:
    messages = body["messages"]
    by_id = {m["tool_call_id"]: m for m in messages if m.get("role") == "tool"}
    fwd = {m.get("tool_call_id"): m for m in out if m.get("role") == "tool"}
    newest = protected(messages)
    recent_ids = recent(newest)
    dumped = {orjson.dumps(m) for m in out}
    alive = {i for i, keys in ev.items() if survives(by_id[i]["content"], fwd.get(i), keys)}
    # Cache mode brings old results back in one message (planner/cache/agent.py): what it holds is
    # in the forwarded request too.
    recalled = "\n".join(
        m["content"]
        for m in out
        if m.get("role") == "system"
        and isinstance(m.get("content"), str)
        and m["content"].startswith(RECALL_TOOLS_HEAD)
    )
    if recalled:
        alive |= {i for i, keys in ev.items() if keys and all(k in recalled for k in keys)}
    used = tok.count_request({**body, "messages": out})
    return {
        "fits": used <= budget,
        "used": used / budget,
        "paired": paired(out),
        "identical": all(orjson.dumps(m) in dumped for m in newest),
        "kept": len(alive),
        "kept_old": len(alive - recent_ids),
        "cleared": sum(
            isinstance(m.get("content"), str) and m["content"].startswith(CLEARED) for m in out
        ),
    }


def run(rows: Sequence[dict[str, Any]], budgets: Sequence[int], min_len: int) -> dict[str, Any]:
    tok = TokenCounter().chat_tokenizer(MODEL, Policy())
    results: dict[str, Any] = {}
    for budget in budgets:
        methods = (
            ("planner", planner),
            ("planner+cache", cache_planner),
            ("keep-newest", keep_newest),
            ("oracle", oracle),
        )
        for name, method in methods:
            t = {"points": 0, "answered": 0, "fits": 0, "paired": 0, "identical": 0}
            t |= {"evidence": 0, "kept": 0, "old": 0, "kept_old": 0, "cleared": 0, "errors": 0}
            t["required_over"] = 0  # not answered, and the protected parts alone overflow
            used = 0.0
            start = time.perf_counter()
            for row in rows:
                msgs = row["messages"]
                for k, m in enumerate(msgs):
                    command = command_of(m)
                    if command is None or k < 2:
                        continue
                    body = {"model": MODEL, "messages": msgs[:k], "tools": row["tools"]}
                    if tok.count_request(body) <= budget:
                        continue
                    ev = evidence(msgs[:k], command, min_len)
                    t["points"] += 1
                    t["evidence"] += len(ev)
                    t["old"] += len(set(ev) - recent(protected(msgs[:k])))
                    out = method(body, tok, budget, ev)
                    if isinstance(out, str):
                        t["errors"] += out.startswith("error")
                        t["required_over"] += required_over(body, tok, budget)
                        continue
                    s = score(body, out, ev, tok, budget)
                    t["answered"] += 1
                    used += s["used"]
                    for key in ("fits", "paired", "identical", "kept", "kept_old", "cleared"):
                        t[key] += int(s[key])
            n = max(t["points"], 1)
            results.setdefault(str(budget), {})[name] = {
                **t,
                "answered_share": t["answered"] / n,
                "fits_share": t["fits"] / n,
                "recall": t["kept"] / max(t["evidence"], 1),
                "recall_old": t["kept_old"] / max(t["old"], 1),
                "budget_used": used / max(t["answered"], 1),
                "seconds": round(time.perf_counter() - start, 2),
            }
    return results


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH)
    ap.add_argument("--budgets", default="8000,16000,32000")
    ap.add_argument("--limit", type=int, default=0, help="only the first N runs")
    ap.add_argument("--min-len", type=int, default=8)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    rows = load(args.path.resolve())[: args.limit or None]
    budgets = [int(b) for b in args.budgets.split(",")]
    results = run(rows, budgets, args.min_len)
    cols = (
        "points",
        "evidence",
        "answered_share",
        "fits_share",
        "recall",
        "recall_old",
        "budget_used",
        "cleared",
    )
    print(f"{len(rows)} runs; budget == window (ratio 1.0); model {MODEL}")
    print("budget  method         " + "".join(f"{c:>15}" for c in cols) + "  paired/identical")
    for budget, row in results.items():
        for name, r in row.items():
            cells = "".join(
                f"{r[c]:>15.3f}" if isinstance(r[c], float) else f"{r[c]:>15}" for c in cols
            )
            extra = f"   {r['paired']}/{r['identical']} of {r['answered']}"
            if r["answered"] < r["points"]:
                extra += f"; not answered {r['points'] - r['answered']} ({r['errors']} errors,"
                extra += f" {r['required_over']} with the protected part over the budget)"
            print(f"{budget:>6}  {name:<14} {cells}{extra}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"runs": len(rows), "budgets": budgets, "min_len": args.min_len, "model": MODEL}
    args.out.write_bytes(
        orjson.dumps({"meta": meta, "results": results}, option=orjson.OPT_INDENT_2)
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
