"""Overhead benchmark: the fake upstream called directly, through the proxy, through LiteLLM.

Run: /work/venv/bin/python tests/bench/overhead.py [--duration 5] [--soak 100000]
     [--targets relay,proxy,proxy2,litellm] [--litellm-venv /work/litellm-venv] [--delay-ms 20]

Everything runs on loopback as separate processes: tests/bench/fake_upstream_server.py,
the minimal Starlette + aiohttp relay (relay.py, the floor the proxy's CPU per request
is compared to), `python -m proxy serve` (one worker, then `--workers 2`), LiteLLM's proxy when its venv
exists, and wrk (loadgen.py). Per target and per mode (plain, `stream: true`): latency at
1 connection, throughput at 16 and 64, server CPU per request (utime+stime of the process
tree from /proc), resident memory after the runs, and startup (spawn to a 200 on health).
A second fake upstream that waits `--delay-ms` before answering gives the throughput
ratio under an upstream with some latency, as real ones have. Writes
tests/bench/results/overhead.json and prints markdown tables (report_overhead.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from loadgen import chat_body, have_wrk, run_wrk  # noqa: E402
from procs import Server, busy_seconds, children_cpu, free_port, machine, post  # noqa: E402
from report_overhead import print_tables  # noqa: E402

PY = sys.executable
RESULTS = HERE / "results" / "overhead.json"
KEY = "sk-bench-not-a-real-key"
CHAT = "/v1/chat/completions"
CONNECTIONS = (1, 16, 64)
LITELLM_CONFIG = """model_list:
  - model_name: gpt-4o
    litellm_params: {model: openai/gpt-4o, api_base: "http://127.0.0.1:%(up)d/v1", api_key: sk-up}
  - model_name: gpt-4o-slow
    litellm_params: {model: openai/gpt-4o, api_base: "http://127.0.0.1:%(slow)d/v1", api_key: sk-up}
general_settings:
  master_key: %(key)s
"""


def fake_upstream(tmp: Path, delay_ms: float = 0.0) -> Server:
    port = free_port()
    cmd = [PY, str(HERE / "fake_upstream_server.py"), "--port", str(port)]
    cmd += ["--delay-ms", str(delay_ms)]
    return Server(
        f"fake upstream {delay_ms:g} ms", cmd, port, "/healthz", log=tmp / f"up{port}.log"
    )


def context_proxy(tmp: Path, upstream: int, workers: int) -> Server:
    policies = tmp / "policies"
    policies.mkdir(exist_ok=True)
    (policies / "default.yaml").write_text("")
    port = free_port()
    cmd = [PY, "-m", "proxy", "serve", "--port", str(port), "--workers", str(workers)]
    cmd += ["--upstream", f"http://127.0.0.1:{upstream}/v1", "--policies", str(policies)]
    cmd += ["--usage-log", str(tmp / f"usage{port}.jsonl")]
    name = f"context-proxy {workers}w"
    return Server(name, cmd, port, "/healthz", {"PYTHONPATH": str(ROOT)}, tmp / f"proxy{port}.log")


def relay(tmp: Path, upstream: int) -> Server:
    """The minimal Starlette + aiohttp relay (relay.py): the floor the proxy is held to."""
    port = free_port()
    cmd = [PY, str(HERE / "relay.py"), "--port", str(port)]
    cmd += ["--upstream", f"http://127.0.0.1:{upstream}/v1"]
    return Server("relay", cmd, port, "/healthz", log=tmp / f"relay{port}.log")


def litellm(tmp: Path, venv: Path, upstream: int, slow: int) -> Server:
    config = tmp / "litellm.yaml"
    config.write_text(LITELLM_CONFIG % {"up": upstream, "slow": slow, "key": KEY})
    port = free_port()
    cmd = [str(venv / "bin" / "litellm"), "--config", str(config), "--port", str(port)]
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False"}
    return Server("litellm", cmd, port, "/health/liveliness", env, tmp / "litellm.log")


def smoke(port: int, model: str) -> dict[str, Any]:
    """One plain and one streamed request must succeed before any load is sent."""
    found: dict[str, Any] = {}
    for stream in (False, True):
        status, headers, body = post(
            port, CHAT, chat_body(stream, model), {"authorization": f"Bearer {KEY}"}
        )
        if status != 200 or (stream and b"[DONE]" not in body):
            raise RuntimeError(f"smoke request failed: {status} {body[:300]!r}")
        found["stream" if stream else "plain"] = {
            k: v for k, v in headers.items() if k.startswith("x-context")
        }
    return found


def measure(
    server: Server | None,
    upstream: Server,
    port: int,
    model: str,
    seconds: float,
    conns: tuple[int, ...],
) -> dict[str, Any]:
    """Per mode and connection count: wrk's figures, the server's CPU per request, and how
    much CPU other processes on the machine took meanwhile (noise: 2 cores are shared)."""
    url = f"http://127.0.0.1:{port}{CHAT}"
    out: dict[str, Any] = {"runs": {}}
    for stream in (False, True):
        body = chat_body(stream, model)
        run_wrk(url, body, 16, min(2.0, seconds))  # warm: pools, lazy loads, caches
        mode: dict[str, Any] = {}
        for c in conns:
            before = cpu_snapshot(server, upstream)
            result = run_wrk(url, body, c, seconds).to_json()
            used = [b - a for a, b in zip(before, cpu_snapshot(server, upstream), strict=True)]
            target, up, wrk, busy = used
            if server:
                result["cpu_ms_per_request"] = round(1000 * target / max(result["requests"], 1), 3)
            result["wrk_cores"] = round(wrk / result["seconds"], 2)
            result["upstream_cores"] = round(up / result["seconds"], 2)
            result["other_cores"] = round(max(busy - target - up - wrk, 0) / result["seconds"], 2)
            mode[str(c)] = result
            print(f"  {'stream' if stream else 'plain '} c={c:<3} {fmt(result)}", flush=True)
        out["runs"]["stream" if stream else "plain"] = mode
    if server:
        out["rss_mb"] = server.rss()
    return out


def cpu_snapshot(server: Server | None, upstream: Server) -> tuple[float, float, float, float]:
    return (server.cpu() if server else 0.0, upstream.cpu(), children_cpu(), busy_seconds())


def fmt(r: dict[str, Any]) -> str:
    cpu = f" cpu/req {r['cpu_ms_per_request']:.3f} ms" if "cpu_ms_per_request" in r else ""
    return (
        f"{r['rps']:>9.1f} req/s p50 {r['p50_ms']:.3f} p99 {r['p99_ms']:.3f} ms "
        f"err {r['errors']}{cpu} others {r['other_cores']:.2f} cores"
    )


def soak(server: Server, port: int, total: int, chunk_s: float) -> dict[str, Any]:
    """Plain requests at 16 connections until `total`, sampling RSS after each chunk."""
    url, body, done = f"http://127.0.0.1:{port}{CHAT}", chat_body(False), 0
    samples = [{"requests": 0, "rss_mb": server.rss()}]
    errors = 0
    while done < total:
        result = run_wrk(url, body, 16, chunk_s)
        done += result.requests
        errors += result.errors
        samples.append({"requests": done, "rss_mb": server.rss()})
        print(f"  soak {done:>8} requests, RSS {samples[-1]['rss_mb']}", flush=True)
    return {"requests": done, "errors": errors, "samples": samples}


@dataclass
class Bench:
    args: argparse.Namespace
    tmp: Path
    up: Server  # answers at once
    slow: Server  # answers after --delay-ms


def run_target(bench: Bench, server: Server, slow_model: str | None = None) -> dict[str, Any]:
    """Start one server, check it, load it plain and streamed, then stop it."""
    args = bench.args
    print(f"{server.name}: starting", flush=True)
    server.start()
    print(f"  ready in {server.startup_s:.2f} s, RSS {server.rss()}", flush=True)
    try:
        result: dict[str, Any] = {"startup_s": round(server.startup_s, 3)}
        result["rss_idle_mb"] = server.rss()
        result["smoke_headers"] = smoke(server.port, "gpt-4o")
        result.update(measure(server, bench.up, server.port, "gpt-4o", args.duration, CONNECTIONS))
        if slow_model:
            print("  with the slow upstream:")
            slow = measure(server, bench.slow, server.port, slow_model, args.duration, (16, 64))
            result["slow_upstream"] = slow["runs"]
        if args.soak and server.name == "context-proxy 1w":
            result["soak"] = soak(server, server.port, args.soak, args.soak_chunk)
        return result
    finally:
        server.stop()


def run_slow_proxy(bench: Bench) -> dict[str, Any]:
    """The proxy in front of the slow upstream: its own instance (the upstream is a flag)."""
    server = context_proxy(bench.tmp, bench.slow.port, 1)
    print(f"{server.name} -> slow upstream", flush=True)
    server.start()
    try:
        port, seconds = server.port, bench.args.duration
        return dict(measure(server, bench.slow, port, "gpt-4o", seconds, (16, 64))["runs"])
    finally:
        server.stop()


def run_all(bench: Bench, only: set[str]) -> dict[str, Any]:
    targets: dict[str, Any] = {}
    up, slow, seconds = bench.up, bench.slow, bench.args.duration
    print("direct (fake upstream)", flush=True)
    targets["direct"] = measure(None, up, up.port, "gpt-4o", seconds, CONNECTIONS)
    print("  with the slow upstream:")
    direct_slow = measure(None, slow, slow.port, "gpt-4o", seconds, (16, 64))
    targets["direct"]["slow_upstream"] = direct_slow["runs"]
    if "relay" in only:
        targets["relay"] = run_target(bench, relay(bench.tmp, up.port))
    if "proxy" in only:
        targets["context-proxy 1w"] = run_target(bench, context_proxy(bench.tmp, up.port, 1))
        targets["context-proxy 1w"]["slow_upstream"] = run_slow_proxy(bench)
    if "proxy2" in only:
        targets["context-proxy 2w"] = run_target(bench, context_proxy(bench.tmp, up.port, 2))
    if "litellm" in only:
        targets["litellm"] = run_litellm(bench)
    return targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="the slow upstream's delay")
    parser.add_argument("--soak", type=int, default=0, help="requests for the RSS soak (1 worker)")
    parser.add_argument("--soak-chunk", type=float, default=10.0, help="seconds between samples")
    parser.add_argument(
        "--targets",
        default="relay,proxy,proxy2,litellm",
        help="besides direct: relay,proxy,proxy2,litellm",
    )
    parser.add_argument("--litellm-venv", type=Path, default=Path("/work/litellm-venv"))
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    if not have_wrk():
        sys.exit("wrk is missing: apt-get install -y wrk")
    report: dict[str, Any] = {"machine": machine(), "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    report["config"] = {k: str(v) for k, v in vars(args).items()}
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as name:
        tmp = Path(name)
        up = fake_upstream(tmp).start()
        try:
            slow = fake_upstream(tmp, args.delay_ms).start()
            try:
                bench = Bench(args, tmp, up, slow)
                report["targets"] = run_all(bench, set(args.targets.split(",")))
            finally:
                slow.stop()
        finally:
            up.stop()
    report["machine"]["loadavg_at_end"] = os.getloadavg()[0]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print(f"\nwrote {args.output}\n")
    print_tables(report)


def run_litellm(bench: Bench) -> dict[str, Any]:
    """LiteLLM's proxy; when it is missing or fails, the reason goes into the results."""
    venv = bench.args.litellm_venv
    if not (venv / "bin" / "litellm").exists():
        return {"skipped": f"no litellm in {venv}: pip install 'litellm[proxy]'"}
    server = litellm(bench.tmp, venv, bench.up.port, bench.slow.port)
    try:
        result = run_target(bench, server, slow_model="gpt-4o-slow")
        result["version"] = litellm_version(venv)
        return result
    except RuntimeError as exc:
        log = (bench.tmp / "litellm.log").read_text(errors="replace")[-2000:]
        return {"skipped": f"{exc}", "log_tail": log}


def litellm_version(venv: Path) -> str:
    meta = sorted((venv / "lib").glob("python3*/site-packages/litellm-*.dist-info"))
    return meta[0].name.removeprefix("litellm-").removesuffix(".dist-info") if meta else "?"


if __name__ == "__main__":
    main()
