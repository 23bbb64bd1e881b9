"""Profile the proxy under load: py-spy samples one worker while wrk sends small requests.

Run: /work/venv/bin/python tests/bench/profile_proxy.py [--stream] [--big] [--relay]
     [--seconds 10] [--connections 16] [--raw OUT.txt]

Starts the fast fake upstream and `python -m proxy serve` (one worker), warms it up, then
records with `py-spy record --format raw` while wrk runs, and prints where the main
thread's samples go: the heaviest functions by inclusive share (proxy's own code, then
everything) and by self share. py-spy is not a project dependency: pip install py-spy.
`--big` sends bench_trim.py's next turn instead (600 messages, 292 KB, over budget, so
trimmed every time; the proxy's caches are warm after the warm-up, as on a real next turn).
`--relay` profiles relay.py (the floor) the same way. The server's CPU over the recorded
span (all threads, and the main thread alone, from /proc) per request turns shares into
microseconds (hotpath.py). Writes the summary to tests/bench/results/profile_plain.json
(profile_stream.json, profile_big.json, profile_relay_plain.json, ...).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from loadgen import chat_body, run_wrk  # noqa: E402
from overhead import context_proxy, fake_upstream, relay  # noqa: E402
from procs import TICKS, Server  # noqa: E402

_LINE = re.compile(r":\d+\)$")
_SITE = re.compile(r"/[^ ]*/site-packages/|/[^ ]*/lib/python3\.\d+/")


def main_thread_lines(raw: Path) -> tuple[list[tuple[list[str], int]], Counter[str]]:
    """The main thread's stacks (frames outermost first, counts), and the other threads'.

    Recorded with --threads, each stack starts with its thread ("thread (TID): NAME"); the
    event loop runs in MainThread. Its torn samples (py-spy reads without pausing, so some
    coroutine stacks lack their root) still count as its own: they are its CPU."""
    parsed = []
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        thread, _, rest = stack.partition(";")
        parsed.append((thread, [f for f in rest.split(";") if f], int(count)))
    mine, others = [], Counter[str]()
    for thread, frames, n in parsed:
        if thread.endswith(": MainThread"):
            names = frames or ["(no Python frame: uvloop, C)"]
            mine.append(([_SITE.sub("", _LINE.sub(")", f)) for f in names], n))
        elif frames:
            others[_LINE.sub(")", frames[min(2, len(frames) - 1)])] += n
    return mine, others


def summarize(raw: Path, top: int) -> dict[str, Any]:
    """Collapsed stacks ("thread;frame;frame;... count") to shares of the main thread's samples.

    Other threads (the usage-log writer, anyio's worker threads) mostly wait in C, which
    py-spy cannot always tell from work; their sample counts are reported apart (their
    CPU is measured from /proc instead)."""
    inclusive, own, total = Counter[str](), Counter[str](), 0
    stacks, others = main_thread_lines(raw)
    for frames, n in stacks:
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n

    def share(counter: Counter[str], only: str = "") -> list[tuple[str, float]]:
        rows = [(f, n) for f, n in counter.most_common() if only in f][:top]
        return [(f, round(100 * n / max(total, 1), 1)) for f, n in rows]

    return {
        "main_thread_samples": total,
        "other_thread_samples": dict(others.most_common(5)),
        "inclusive_proxy": share(inclusive, "proxy/"),
        "inclusive_all": share(inclusive),
        "self": share(own),
    }


def big_body(stream: bool) -> bytes:
    """bench_trim.py's next turn: the 128k-token conversation plus an answer and a question."""
    from bench_tokens import conversation
    from bench_trim import next_turn

    body = next_turn(orjson.dumps({"model": "gpt-4o", "messages": conversation()}), 0)
    return body[:-1] + b',"stream":true}' if stream else body


def thread_cpu(pid: int) -> float:
    """CPU seconds of the main thread alone (its task id is the process id)."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def record(args: argparse.Namespace, server: Server, raw: Path) -> dict[str, Any]:
    """wrk and py-spy for the same seconds; the server's CPU (all threads, main thread)
    over that span, per request, so that sample shares become microseconds."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
    body = big_body(args.stream) if args.big else chat_body(args.stream)
    run_wrk(url, body, args.connections, 2)  # warm-up
    result: dict[str, Any] = {}
    load = threading.Thread(
        target=lambda: result.update(run_wrk(url, body, args.connections, args.seconds).to_json())
    )
    before, main_before = server.cpu(), thread_cpu(server.pid)
    load.start()
    cmd = [py_spy, "record", "--pid", str(server.pid), "--duration", str(int(args.seconds))]
    cmd += ["--rate", "250", "--format", "raw", "--threads"]
    # --native shows C frames (the garbage collector, orjson, uvloop); it must pause the
    # process to unwind them, so it costs the server more than the default.
    cmd += ["--native"] if args.native else ["--nonblocking"]
    subprocess.run([*cmd, "--output", str(raw)], check=True, capture_output=True)
    load.join()
    requests = max(result.get("requests", 0), 1)
    return {
        "requests": requests,
        "rps": result.get("rps"),
        "cpu_us_per_request": round(1e6 * (server.cpu() - before) / requests, 1),
        "main_thread_cpu_us_per_request": round(
            1e6 * (thread_cpu(server.pid) - main_before) / requests, 1
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--big", action="store_true", help="the 600-message next turn")
    parser.add_argument("--relay", action="store_true", help="profile relay.py instead")
    parser.add_argument("--native", action="store_true", help="C frames too (py-spy --native)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--top", type=int, default=35)
    parser.add_argument("--raw", type=Path, help="keep py-spy's collapsed stacks here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as name:
        tmp = Path(name)
        raw = args.raw or tmp / "stacks.txt"
        up = fake_upstream(tmp).start()
        server = relay(tmp, up.port) if args.relay else context_proxy(tmp, up.port, 1)
        server.start()
        try:
            measured = record(args, server, raw)
            summary = {**measured, **summarize(raw, args.top)}
        finally:
            server.stop()
            up.stop()
    kind = "big" if args.big else "stream" if args.stream else "plain"
    out = HERE / "results" / f"profile_{'relay_' if args.relay else ''}{kind}.json"
    out.write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    print(
        f"{summary['requests']} requests, {summary['rps']} req/s; CPU per request "
        f"{summary['cpu_us_per_request']} µs (main thread {summary['main_thread_cpu_us_per_request']})"
    )
    print(f"{summary['main_thread_samples']} main-thread samples; shares of those below")
    print(f"other threads: {summary['other_thread_samples']}")
    for title in ("inclusive_proxy", "self"):
        print(f"\n{title}:")
        for frame, pct in summary[title]:
            print(f"  {pct:5.1f}%  {frame}")


if __name__ == "__main__":
    main()
