"""Benchmark step 4: the proxy's CPU per request against the relay's, in alternating rounds.

Run: /work/venv/bin/python tests/bench/side_by_side.py [--rounds 5] [--seconds 2]
     [--connections 16] [--output results/side_by_side.json] [--baseline CHECKOUT]

With --baseline (a checkout of an earlier commit, e.g. a `git worktree`), the reference is
that commit's proxy instead of the relay: a change's CPU per request against the code
before it, in the same alternating rounds.

overhead.py measures one target after the other; on a machine shared with other work the
load changes between them, and the ratio with it. Here both servers (relay.py and
`python -m proxy serve`, one worker each, one fake upstream) run at once and wrk loads
them in turn, short rounds alternating, plain then streamed: each round's CPU per request
(utime+stime from /proc) and the CPU other processes took meanwhile are kept, and the
ratio reported is the median of the per-round-pair ratios (a burst of outside load then
spoils one pair, not the result).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from loadgen import chat_body, run_wrk  # noqa: E402
from overhead import CHAT, context_proxy, cpu_snapshot, fake_upstream, relay, smoke  # noqa: E402
from procs import Server, machine  # noqa: E402


def one_round(server: Server, up: Server, stream: bool, conns: int, secs: float) -> dict[str, Any]:
    """One wrk run against `server`: req/s, p50, CPU per request, others' cores."""
    before = cpu_snapshot(server, up)
    result = run_wrk(f"http://127.0.0.1:{server.port}{CHAT}", chat_body(stream), conns, secs)
    mine, upstream, wrk, busy = (
        b - a for a, b in zip(before, cpu_snapshot(server, up), strict=True)
    )
    return {
        "rps": result.rps,
        "p50_ms": result.p50_ms,
        "errors": result.errors,
        "cpu_us_per_request": round(1e6 * mine / max(result.requests, 1), 1),
        "other_cores": round(max(busy - mine - upstream - wrk, 0) / result.seconds, 2),
    }


def compare(
    servers: dict[str, Server], up: Server, stream: bool, args: argparse.Namespace
) -> dict[str, Any]:
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in servers}
    for i in range(args.rounds):
        # Alternate who goes first, so neither always follows the other's warm caches.
        order = list(servers) if i % 2 == 0 else list(reversed(servers))
        for name in order:
            rounds[name].append(
                one_round(servers[name], up, stream, args.connections, args.seconds)
            )
        pair = {n: rounds[n][-1] for n in servers}
        print(
            f"  {'stream' if stream else 'plain '} round {i + 1}: "
            + "  ".join(
                f"{n} {r['cpu_us_per_request']:.0f} µs/req {r['rps']:.0f} req/s "
                f"(others {r['other_cores']:.2f})"
                for n, r in pair.items()
            ),
            flush=True,
        )
    ratios = [
        p["cpu_us_per_request"] / r["cpu_us_per_request"]
        for p, r in zip(rounds["proxy"], rounds["relay"], strict=True)
    ]
    medians = {
        n: statistics.median(r["cpu_us_per_request"] for r in rs) for n, rs in rounds.items()
    }
    return {
        "rounds": rounds,
        "ratios": ratios,
        "median_ratio": statistics.median(ratios),
        "median_cpu_us": medians,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--output", type=Path, default=HERE / "results" / "side_by_side.json")
    parser.add_argument("--baseline", type=Path, help="a checkout whose proxy is the reference")
    args = parser.parse_args()
    report: dict[str, Any] = {
        "machine": machine(),
        "config": {k: str(v) for k, v in vars(args).items()},
    }
    with tempfile.TemporaryDirectory(prefix="bench-side-") as name:
        tmp = Path(name)
        up = fake_upstream(tmp).start()
        reference = relay(tmp, up.port)
        if args.baseline is not None:  # the same proxy command, run from the other checkout
            reference = context_proxy(tmp, up.port, 1)
            # `python -m` puts its working directory first on the path: run from there, or
            # the checkout in the working directory is the one that runs.
            reference.env = {"PYTHONPATH": str(args.baseline.resolve())}
            reference.cwd = args.baseline.resolve()
            reference.name = "baseline"
        servers = {"relay": reference, "proxy": context_proxy(tmp, up.port, 1)}
        try:
            for server in servers.values():
                server.start()
                smoke(server.port, "gpt-4o")
                for stream in (False, True):  # warm: pools, lazy loads, caches
                    run_wrk(f"http://127.0.0.1:{server.port}{CHAT}", chat_body(stream), 16, 1)
            for stream in (False, True):
                report["stream" if stream else "plain"] = compare(servers, up, stream, args)
        finally:
            for server in servers.values():
                server.stop()
            up.stop()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print(f"\nwrote {args.output}\n")
    ref = "relay" if args.baseline is None else "baseline"
    print(
        f"| mode | {ref} µs/req | proxy µs/req | proxy ÷ {ref} (median of {args.rounds} pairs) "
        "| pair ratios |\n|---|---|---|---|---|"
    )
    for mode in ("plain", "stream"):
        m = report[mode]
        cells = [
            mode,
            f"{m['median_cpu_us']['relay']:.0f}",
            f"{m['median_cpu_us']['proxy']:.0f}",
            f"**{m['median_ratio']:.2f}**",
            ", ".join(f"{r:.2f}" for r in m["ratios"]),
        ]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
