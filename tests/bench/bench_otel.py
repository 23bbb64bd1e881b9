"""Tracing's cost: the proxy's CPU per request with OpenTelemetry off and on, beside the
same proxy built without tracing and the minimal relay, in alternating rounds.

Run: python tests/bench/bench_otel.py --before <commit> [--rounds 6] [--seconds 2]

Four servers run at once against one fake upstream and wrk loads them in turn (plain
requests, one worker each): `relay` (relay.py, the floor), `before` (the proxy at
`--before`, checked out into a temporary worktree), `off` (this tree, no endpoint) and `on`
(this tree with `--otel` at a sink that accepts OTLP/HTTP and discards it). Each round's
CPU per request comes from /proc (side_by_side.py's method); the figures are the medians
of the per-round ratios. Writes results/otel.json and a section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from loadgen import chat_body, run_wrk  # noqa: E402
from overhead import CHAT, PY, fake_upstream, relay, smoke  # noqa: E402
from procs import Server, free_port, machine, write_doc_section  # noqa: E402
from side_by_side import one_round  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
MARKS = ("<!-- bench_otel: begin -->", "<!-- bench_otel: end -->")


def proxy(tmp: Path, root: Path, upstream: int, name: str, otel: str | None) -> Server:
    policies = tmp / "policies"
    policies.mkdir(exist_ok=True)
    (policies / "default.yaml").write_text("")
    port = free_port()
    cmd = [PY, "-m", "proxy", "serve", "--port", str(port), "--workers", "1"]
    cmd += ["--upstream", f"http://127.0.0.1:{upstream}/v1", "--policies", str(policies)]
    cmd += ["--usage-log", str(tmp / f"usage{port}.jsonl")]
    if otel:
        cmd += ["--otel", otel]
    return Server(name, cmd, port, "/healthz", {"PYTHONPATH": str(root)}, tmp / f"{name}.log")


def sink() -> str:
    """An OTLP/HTTP endpoint that takes every export and keeps nothing, in a thread."""

    async def take(request: Request) -> Response:
        await request.body()
        return Response(b"", media_type="application/x-protobuf")

    port = free_port()
    app = Starlette(routes=[Route("/v1/traces", take, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    return f"http://127.0.0.1:{port}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit to compare `off` with")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-otel-") as name:
        tmp = Path(name)
        old = tmp / "before"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(old), args.before],
            check=True,
        )
        up = fake_upstream(tmp).start()
        servers = {
            "relay": relay(tmp, up.port),
            "before": proxy(tmp, old, up.port, "before", None),
            "off": proxy(tmp, ROOT, up.port, "off", None),
            "on": proxy(tmp, ROOT, up.port, "on", sink()),
        }
        rounds: dict[str, list[dict[str, Any]]] = {n: [] for n in servers}
        try:
            for server in servers.values():
                server.start()
                smoke(server.port, "gpt-4o")
                run_wrk(f"http://127.0.0.1:{server.port}{CHAT}", chat_body(False), 16, 1)
            for i in range(args.rounds):
                order = list(servers) if i % 2 == 0 else list(reversed(servers))
                for n in order:
                    rounds[n].append(
                        one_round(servers[n], up, False, args.connections, args.seconds)
                    )
                print(
                    "  round",
                    i + 1,
                    {n: rounds[n][-1]["cpu_us_per_request"] for n in servers},
                    flush=True,
                )
        finally:
            for server in servers.values():
                server.stop()
            up.stop()
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False
            )

    def ratio(a: str, b: str) -> float:
        return statistics.median(
            x["cpu_us_per_request"] / y["cpu_us_per_request"]
            for x, y in zip(rounds[a], rounds[b], strict=True)
        )

    cpu = {n: statistics.median(r["cpu_us_per_request"] for r in rs) for n, rs in rounds.items()}
    report = {"machine": machine(), "before": args.before, "cpu_us": cpu,
              "off_vs_before": ratio("off", "before"), "on_vs_off": ratio("on", "off"),
              "off_vs_relay": ratio("off", "relay"), "rounds": rounds}  # fmt: skip
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "otel.json").write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    table = "\n".join([
        "| server | CPU µs/request (median) | ratio |",
        "|---|---|---|",
        f"| relay (the floor) | {cpu['relay']:.0f} | |",
        f"| proxy before tracing ({args.before[:7]}) | {cpu['before']:.0f} | |",
        f"| proxy, tracing off | {cpu['off']:.0f} | {report['off_vs_before']:.3f} × before; {report['off_vs_relay']:.2f} × relay |",
        f"| proxy, tracing on | {cpu['on']:.0f} | {report['on_vs_off']:.3f} × off (+{cpu['on'] - cpu['off']:.0f} µs) |",
    ])  # fmt: skip
    print(table)
    command = f"python tests/bench/bench_otel.py --before {args.before[:7]} --rounds {args.rounds}"
    write_doc_section(DOC, MARKS, "Tracing's cost (OpenTelemetry off and on)", command, table)


if __name__ == "__main__":
    main()
