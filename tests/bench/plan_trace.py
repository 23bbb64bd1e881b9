"""Plan trace: the planner modules one request's planning passes through, in order.

Usage: python tests/bench/plan_trace.py [--budget 4000] [--cache on|off] [--set locomo|agents]

Plans one over-budget request (the first LoCoMo conversation with a question, or an agent
run's last decision point) and follows it with a profile hook: every call of a named function or method (not a
lambda, a comprehension or a local helper) of `proxy/planner/` is a stop when it is in
another module than the one before. Prints the
modules visited, the stops, the returns (a stop in a module the request had already left)
and the path, room by room.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from types import FrameType
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from bench_locomo import DEFAULT_PATH as LOCOMO  # noqa: E402
from bench_locomo import MODEL, SYSTEM, load  # noqa: E402

from proxy.planner import plan_request  # noqa: E402
from proxy.policy.model import BudgetPolicy, CachePolicy, ModelPolicy, Policy  # noqa: E402
from proxy.tokens import TokenCounter  # noqa: E402

PLANNER = ROOT / "proxy" / "planner"
AGENT_RUNS = ROOT / ".." / "shared" / "data" / "agent-runs" / "trajectories.jsonl"


def request(kind: str) -> dict[str, Any]:
    if kind == "agents":
        row = orjson.loads(AGENT_RUNS.read_bytes().splitlines()[0])
        msgs = row["messages"]
        last = max(k for k, m in enumerate(msgs) if m.get("tool_calls"))
        return {"model": MODEL, "messages": msgs[:last], "tools": row["tools"]}
    convs, cases, _ = load(LOCOMO.resolve())
    case = cases[0]
    messages = [{"role": "system", "content": SYSTEM}, *convs[case.conv].messages]
    return {"model": MODEL, "messages": [*messages, {"role": "user", "content": case.question}]}


def trace(body: dict[str, Any], policy: Policy, budget: int) -> list[str]:
    tok = TokenCounter().for_model(MODEL, Policy())
    path: list[str] = []
    root = str(PLANNER)

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        name = code.co_filename
        # A named function or method: not a lambda, a comprehension or a local helper.
        if not name.startswith(root) or "<" in code.co_qualname:
            return
        module = str(Path(name).relative_to(PLANNER).with_suffix("")).replace("/", ".")
        if not path or path[-1] != module:
            path.append(module)

    sys.setprofile(hook)
    try:
        plan_request(body, policy, tok, budget)
    finally:
        sys.setprofile(None)
    return path


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--budget", type=int, default=4000)
    ap.add_argument("--cache", choices=("on", "off"), default="on")
    ap.add_argument("--set", choices=("locomo", "agents"), default="locomo")
    args = ap.parse_args(argv)
    policy = Policy(
        budget=BudgetPolicy(ratio=1.0, reserve_output=False),
        models={MODEL: ModelPolicy(context_window=args.budget)},
        cache=CachePolicy(enabled=args.cache == "on"),
    )
    path = trace(request(args.set), policy, args.budget)
    # The same path by room (the sub-package; the façade, which hands the request from one
    # room to the next, left out).
    rooms = [m.split(".")[0] for m in path if "." in m]
    rooms = [r for k, r in enumerate(rooms) if k == 0 or rooms[k - 1] != r]
    for name, steps in (("modules", path), ("rooms", rooms)):
        left: set[str] = set()
        returns: Counter[str] = Counter()
        for before, now in pairwise(steps):
            left.add(before)
            if now in left:
                returns[now] += 1
        print(
            f"{name} visited: {len(set(steps))}; stops: {len(steps)}; "
            f"returns: {sum(returns.values())} ("
            + ", ".join(f"{m} {n}" for m, n in returns.most_common(6))
            + ")"
        )
    print(" -> ".join(rooms), flush=True)


if __name__ == "__main__":
    main()
