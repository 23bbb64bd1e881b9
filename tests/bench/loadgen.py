"""Benchmark step 1: the load generator, wrk driven by a Lua script that POSTs a chat body.

wrk (Debian package `wrk`) is C with an event loop per thread; at one thread it serves
well over 30k small requests/s on loopback, so the Python servers measured here are the
bottleneck, not it (the direct row of the overhead table shows its ceiling against the
fake upstream). Its `done` hook prints one JSON line with exact percentiles in µs.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

SYSTEM = "You are a concise assistant. Answer in one sentence."
QUESTION = "What is the capital of France? Please answer briefly and explain nothing else."

LUA = """
wrk.method = "POST"
wrk.body = %(body)s
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench-not-a-real-key"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%%d,"duration_us":%%d,"bytes":%%d,"status_errors":%%d,' ..
    '"socket_errors":%%d,"p50_us":%%d,"p90_us":%%d,"p99_us":%%d,"mean_us":%%.1f,' ..
    '"max_us":%%d}\\n',
    summary.requests, summary.duration, summary.bytes, e.status,
    e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.mean, latency.max))
end
"""


def chat_body(stream: bool, model: str = "gpt-4o") -> bytes:
    """A small, realistic request: well within any budget, so the proxy forwards it as is."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTION},
        ],
        "temperature": 0.2,
        "max_tokens": 64,
    }
    if stream:
        body["stream"] = True
    return orjson.dumps(body)


@dataclass
class WrkResult:
    connections: int
    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float
    errors: int  # non-2xx/3xx answers plus socket errors

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def lua_script(body: bytes, folder: Path) -> Path:
    # A Lua long string keeps the JSON verbatim (it never contains "]==]").
    path = folder / ("stream.lua" if b'"stream":true' in body else "plain.lua")
    path.write_text(LUA % {"body": "[==[" + body.decode() + "]==]"})
    return path


def run_wrk(url: str, body: bytes, connections: int, seconds: float, threads: int = 1) -> WrkResult:
    """One wrk run; raises when wrk fails or prints no summary."""
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as tmp:
        script = lua_script(body, Path(tmp))
        cmd = [
            "wrk",
            f"-t{min(threads, connections)}",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--timeout",
            "10s",
            "-s",
            str(script),
            url,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("WRKJSON ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stdout}\n{proc.stderr}")
    raw = orjson.loads(line.removeprefix("WRKJSON "))
    secs = raw["duration_us"] / 1e6
    return WrkResult(
        connections=connections,
        requests=raw["requests"],
        seconds=round(secs, 3),
        rps=round(raw["requests"] / secs, 1),
        p50_ms=raw["p50_us"] / 1000,
        p90_ms=raw["p90_us"] / 1000,
        p99_ms=raw["p99_us"] / 1000,
        mean_ms=round(raw["mean_us"] / 1000, 3),
        max_ms=raw["max_us"] / 1000,
        errors=raw["status_errors"] + raw["socket_errors"],
    )


if __name__ == "__main__":
    import sys

    target = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:9100/v1/chat/completions"
    for stream in (False, True):
        for conns in (1, 16, 64):
            print(stream, run_wrk(target, chat_body(stream), conns, 3).to_json())
