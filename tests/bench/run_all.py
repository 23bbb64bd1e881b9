"""Benchmarks: run every one and regenerate docs/benchmarks.md, one section per benchmark.

Run: /work/venv/bin/python tests/bench/run_all.py [--only quality,trim,...] [--quick]

Each benchmark runs as its own process, one after the other (they measure CPU and must not
share the machine). bench_quality.py, bench_hostile.py and bench_otel.py write their own
sections; for the others the tables they print (every line from the first table row on)
become their section. Each section is headed by the command that produced it, the commit,
the date and the machine. Needs `wrk` (apt-get install -y wrk) for the load benchmarks;
LiteLLM's proxy, for the comparison in `overhead`, is the one the test set-up builds
(tests/litellm_proxy.py), made on first use. The whole run takes about 40 minutes on two
cores; `--quick` shortens every benchmark (smaller samples: for trying the script, not for
the record).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from procs import NO_DOC, write_doc_section  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
# The proxy before tracing existed: bench_otel.py compares tracing-off with it.
BEFORE_TRACING = "c1dda54"


@dataclass(frozen=True)
class Bench:
    name: str
    script: str
    args: tuple[str, ...]
    quick: tuple[str, ...]
    heading: str | None  # None: the script writes its own section

    def command(self, quick: bool) -> list[str]:
        return [sys.executable, str(HERE / self.script), *(self.quick if quick else self.args)]


BENCHES = (
    Bench("quality", "bench_quality.py", (), ("--limit", "2"), None),
    Bench("coherence_e2e", "bench_coherence_e2e.py", (), ("--limit", "2"), None),
    Bench("hostile", "bench_hostile.py", (), (), None),
    Bench(
        "otel", "bench_otel.py", ("--before", BEFORE_TRACING, "--rounds", "10"),
        ("--before", BEFORE_TRACING, "--rounds", "2"), None,
    ),
    Bench(
        "relay", "side_by_side.py", ("--rounds", "5"), ("--rounds", "1"),
        "CPU per request beside a minimal relay",
    ),
    Bench(
        "overhead", "overhead.py", ("--duration", "5", "--soak", "100000"),
        ("--duration", "1", "--targets", "proxy"),
        "Latency, throughput, startup and memory against the direct call and LiteLLM",
    ),
    Bench(
        "trim", "bench_trim.py", ("--repeats", "5"), ("--repeats", "1"),
        "A 128k-token conversation over budget: planning time against a raw tokenizer pass",
    ),
    Bench(
        "distinct", "bench_distinct_rss.py", ("--conversations", "10000"),
        ("--conversations", "500"), "Memory under a stream of distinct conversations",
    ),
    Bench("scan", "bench_scan.py", (), ("--repeats", "1"), None),
    Bench(
        "soak", "soak.py", ("--duration", "300"), ("--duration", "20"),
        "Memory and descriptors under a mixed, hostile load",
    ),
    Bench("soak_fleet", "soak_fleet.py", ("--duration", "300"), ("--duration", "30"), None),
)  # fmt: skip


def tables(output: str) -> str:
    """What a script printed from its first table row on, without temporary paths."""
    lines = output.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    if first is None:
        return "(the script printed no table)"
    # A line or two of context before the table (the script's own heading), then the rest.
    start = first
    while start > 0 and lines[start - 1].strip() and first - start < 2:
        start -= 1
    kept = [line for line in lines[start:] if "/tmp/" not in line and "wrote " not in line]
    return "\n".join(kept).strip()


def litellm_venv() -> Path | None:
    """The test set-up's LiteLLM venv (made on first use), or None if it cannot be made."""
    try:
        from tests.litellm_proxy import litellm_command

        return litellm_command().parents[1]
    except Exception as exc:  # the comparison is optional; the proxy's figures are not
        print(f"run_all: no LiteLLM proxy for the comparison ({exc})", file=sys.stderr)
        return None


def run(bench: Bench, quick: bool) -> bool:
    command = bench.command(quick)
    if bench.name == "overhead" and not quick:
        venv = litellm_venv()
        if venv is not None:
            command += ["--litellm-venv", str(venv)]
    shown = "python " + " ".join([f"tests/bench/{bench.script}", *command[2:]])
    print(f"\n== {bench.name}: {shown}", flush=True)
    began = time.monotonic()
    env = {**os.environ, **({NO_DOC: "1"} if quick else {})}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    sys.stdout.write(done.stdout[-4000:])
    print(f"== {bench.name}: exit {done.returncode} in {time.monotonic() - began:.0f} s")
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
    if bench.heading is not None and not quick and "|" in done.stdout:
        # A benchmark whose own checks failed is recorded all the same, and says so.
        body = tables(done.stdout)
        if done.returncode != 0:
            body += f"\n\n**The script exited {done.returncode}: a check above failed.**"
        marks = (f"<!-- {bench.name}: begin -->", f"<!-- {bench.name}: end -->")
        write_doc_section(DOC, marks, bench.heading, shown, body)
    return done.returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated names: " + ",".join(
        b.name for b in BENCHES))  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="short runs; the doc is not written")
    args = parser.parse_args()
    chosen = [b for b in BENCHES if not args.only or b.name in args.only.split(",")]
    needs_wrk = {"otel", "relay", "overhead"}
    if any(b.name in needs_wrk for b in chosen) and shutil.which("wrk") is None:
        print("run_all: wrk is missing (apt-get install -y wrk)", file=sys.stderr)
        return 2
    failed = [b.name for b in chosen if not run(b, args.quick)]
    if failed:
        print(f"run_all: failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
