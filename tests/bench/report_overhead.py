"""Benchmark step 3: the markdown tables for results/overhead.json (also runnable alone).

Run: /work/venv/bin/python tests/bench/report_overhead.py [tests/bench/results/overhead.json]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson

RESULTS = Path(__file__).resolve().parent / "results" / "overhead.json"


def _run(target: dict[str, Any], mode: str, conns: str, slow: bool = False) -> dict[str, Any]:
    runs = target.get("slow_upstream" if slow else "runs") or {}
    return dict((runs.get(mode) or {}).get(conns) or {})


def _rss(target: dict[str, Any]) -> str:
    """Largest process (a worker), and the sum when there are several."""
    values = list((target.get("rss_mb") or {}).values())
    if not values:
        return "-"
    return f"{max(values):.0f}" + (f" (Σ {sum(values):.0f})" if len(values) > 1 else "")


def _others(target: dict[str, Any], mode: str) -> float:
    """The most CPU (in cores) other processes used during one of the target's runs."""
    runs = (target.get("runs") or {}).get(mode) or {}
    return max((run.get("other_cores", 0.0) for run in runs.values()), default=0.0)


def main_table(report: dict[str, Any]) -> list[str]:
    targets = report["targets"]
    direct = targets["direct"]
    lines = [
        "| target | mode | startup | p50 @1 conn (added) | p99 @1 conn (added) "
        "| req/s @16 (× direct) | req/s @64 (× direct) | CPU/req @16 | RSS MB | others |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, target in targets.items():
        if "skipped" in target:
            lines.append(f"| {name} | - | skipped: {target['skipped'][:80]} |||||||")
            continue
        for mode in ("plain", "stream"):
            one, base1 = _run(target, mode, "1"), _run(direct, mode, "1")
            cells = [name, mode, f"{target['startup_s']:.2f} s" if "startup_s" in target else "-"]
            for key in ("p50_ms", "p99_ms"):
                added = one[key] - base1[key]
                cells.append(
                    f"{one[key]:.2f} ms" + ("" if target is direct else f" ({added:+.2f})")
                )
            for conns in ("16", "64"):
                run, base = _run(target, mode, conns), _run(direct, mode, conns)
                ratio = run["rps"] / base["rps"] if base.get("rps") else 0
                cells.append(f"{run['rps']:,.0f}" + ("" if target is direct else f" ({ratio:.2f})"))
            cpu = _run(target, mode, "16").get("cpu_ms_per_request")
            cells.append("-" if cpu is None else f"{cpu:.2f} ms")
            cells.append(_rss(target) if mode == "stream" else "")
            cells.append(f"{_others(target, mode):.2f}")
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def slow_table(report: dict[str, Any]) -> list[str]:
    targets = report["targets"]
    direct = targets["direct"]
    delay = report.get("config", {}).get("delay_ms", "?")
    lines = [
        f"| target (upstream answers after {delay} ms) | req/s @16 (× direct) "
        "| req/s @64 (× direct) | p50 @16 |",
        "|---|---|---|---|",
    ]
    for name, target in targets.items():
        if "slow_upstream" not in target:
            continue
        cells = [name]
        for conns in ("16", "64"):
            run, base = _run(target, "plain", conns, True), _run(direct, "plain", conns, True)
            ratio = run["rps"] / base["rps"] if base.get("rps") else 0
            cells.append(f"{run['rps']:,.0f}" + ("" if target is direct else f" ({ratio:.2f})"))
        cells.append(f"{_run(target, 'plain', '16', True)['p50_ms']:.2f} ms")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def relay_table(report: dict[str, Any]) -> list[str]:
    """CPU per request (at 16 and 1 connections) and added p50 of each target against the
    minimal relay measured in the same run: the issue's "at most 1.5x the relay" goal."""
    targets = report["targets"]
    relay, direct = targets.get("relay"), targets["direct"]
    if not relay or "runs" not in relay:
        return []
    lines = [
        "| target | mode | CPU/req @16 (relay) | × relay @16 | CPU/req @1 (relay) | × relay @1 "
        "| added p50 @1 (relay's) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, target in targets.items():
        if target is direct or target is relay or "runs" not in target:
            continue
        for mode in ("plain", "stream"):
            cells = [name, mode]
            for conns in ("16", "1"):
                cpu = _run(target, mode, conns).get("cpu_ms_per_request", 0.0)
                floor = _run(relay, mode, conns).get("cpu_ms_per_request", 0.0)
                cells.append(f"{cpu:.3f} ms ({floor:.3f})")
                cells.append(f"**{cpu / floor:.2f}**" if floor else "-")
            base = _run(direct, mode, "1")["p50_ms"]
            added = _run(target, mode, "1")["p50_ms"] - base
            relay_added = _run(relay, mode, "1")["p50_ms"] - base
            cells.append(f"{added:+.3f} ms ({relay_added:+.3f})")
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def soak_lines(report: dict[str, Any]) -> list[str]:
    soak = (report["targets"].get("context-proxy 1w") or {}).get("soak")
    if not soak:
        return []
    samples = soak["samples"]
    first, second, last = (max(s["rss_mb"].values()) for s in (samples[0], samples[1], samples[-1]))
    return [
        f"Soak (1 worker, plain, 16 connections): {soak['requests']:,} requests, "
        f"{soak['errors']} errors; RSS {first:.0f} MB before, {second:.0f} MB after the first "
        f"chunk, {last:.0f} MB at the end (growth after warm-up {last - second:+.1f} MB)."
    ]


def targets_table(report: dict[str, Any]) -> list[str]:
    """The issue's targets against the one-worker proxy, plain requests."""
    proxy, direct = report["targets"].get("context-proxy 1w"), report["targets"]["direct"]
    if not proxy or "runs" not in proxy:
        return []
    added = _run(proxy, "plain", "1")["p50_ms"] - _run(direct, "plain", "1")["p50_ms"]
    ratio = _run(proxy, "plain", "16")["rps"] / _run(direct, "plain", "16")["rps"]
    slow = _run(proxy, "plain", "16", True).get("rps", 0) / max(
        _run(direct, "plain", "16", True).get("rps", 1), 1
    )
    cpu = _run(proxy, "plain", "16")["cpu_ms_per_request"]
    rss = max(proxy["rss_mb"].values())
    soak = proxy.get("soak")
    if soak:
        rss = max(soak["samples"][-1]["rss_mb"].values())
    rows = [
        ("added p50 at 1 connection", "< 1 ms", f"{added:.3f} ms", added < 1),
        ("req/s at 16 conns vs direct (0 ms upstream)", "≥ 0.8", f"{ratio:.2f}", ratio >= 0.8),
        ("req/s at 16 conns vs direct (slow upstream)", "≥ 0.8", f"{slow:.2f}", slow >= 0.8),
        ("proxy CPU per small request", "< 0.5 ms", f"{cpu:.3f} ms", cpu < 0.5),
        (
            "RSS per worker" + (" after soak" if soak else " (no soak run)"),
            "< 160 MB",
            f"{rss:.0f} MB",
            rss < 160,
        ),
        ("startup to /healthz 200", "< 1 s", f"{proxy['startup_s']:.2f} s", proxy["startup_s"] < 1),
    ]
    relay = report["targets"].get("relay")
    if relay and "runs" in relay:
        floor = _run(relay, "plain", "16")["cpu_ms_per_request"]
        rows.insert(
            4,
            (
                "proxy CPU per small request vs the relay",
                "≤ 1.5×",
                f"{cpu / floor:.2f}×",
                cpu / floor <= 1.5,
            ),
        )
    lines = ["| target | goal | measured | met |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {'yes' if ok else '**no**'} |" for a, b, c, ok in rows]
    return lines


def print_tables(report: dict[str, Any]) -> None:
    m = report["machine"]
    print(
        f"Machine: {m['nproc']} × {m['cpu']}, Python {m['python']}, "
        f"load average at start {m['loadavg_at_start']:.2f}; wrk, 1 thread.\n"
        "`others`: the most CPU (cores) processes outside the benchmark used during a run.\n"
    )
    blocks = (main_table(report), relay_table(report), slow_table(report), targets_table(report))
    for block in blocks:
        print("\n".join(block) + "\n")
    for line in soak_lines(report):
        print(line)


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS
    print_tables(orjson.loads(path.read_bytes()))
