"""Profile the proxy under load: py-spy samples one worker while wrk sends small requests.

Run: /work/venv/bin/python tests/bench/profile_proxy.py [--stream] [--big] [--seconds 10]
     [--connections 16] [--raw OUT.txt]

Starts the fast fake upstream and `python -m proxy serve` (one worker), warms it up, then
records with `py-spy record --format raw` while wrk runs, and prints where the main
thread's samples go: the heaviest functions by inclusive share (proxy's own code, then
everything) and by self share. py-spy is not a project dependency: pip install py-spy.
`--big` sends bench_trim.py's next turn instead (600 messages, 292 KB, over budget, so
trimmed every time; the proxy's caches are warm after the warm-up, as on a real next turn).
Writes the summary to tests/bench/results/profile_plain.json (profile_stream.json,
profile_big.json).
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
from overhead import context_proxy, fake_upstream  # noqa: E402

_LINE = re.compile(r":\d+\)$")
_SITE = re.compile(r"/[^ ]*/site-packages/|/[^ ]*/lib/python3\.\d+/")


def summarize(raw: Path, top: int) -> dict[str, Any]:
    """Collapsed stacks ("frame;frame;... count") to shares of the main thread's samples.

    Other threads (the usage-log writer, the policy watcher) mostly wait in C, which
    py-spy cannot always tell from work; their sample counts are reported apart."""
    inclusive, own, others, total = Counter[str](), Counter[str](), Counter[str](), 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        if "_run_module_as_main" not in stack.split(";", 1)[0]:
            others[_LINE.sub(")", stack.split(";")[min(2, stack.count(";"))])] += n
            continue
        total += n
        frames = [_SITE.sub("", _LINE.sub(")", f)) for f in stack.split(";")]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--big", action="store_true", help="the 600-message next turn")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--top", type=int, default=35)
    parser.add_argument("--raw", type=Path, help="keep py-spy's collapsed stacks here")
    args = parser.parse_args()
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as name:
        tmp = Path(name)
        raw = args.raw or tmp / "stacks.txt"
        up = fake_upstream(tmp).start()
        proxy = context_proxy(tmp, up.port, 1).start()
        try:
            url = f"http://127.0.0.1:{proxy.port}/v1/chat/completions"
            body = big_body(args.stream) if args.big else chat_body(args.stream)
            run_wrk(url, body, args.connections, 2)  # warm-up
            load = threading.Thread(
                target=run_wrk, args=(url, body, args.connections, args.seconds + 2)
            )
            load.start()
            cmd = [py_spy, "record", "--pid", str(proxy.pid), "--duration", str(int(args.seconds))]
            cmd += ["--rate", "250", "--format", "raw", "--nonblocking", "--output", str(raw)]
            subprocess.run(cmd, check=True, capture_output=True)
            load.join()
            summary = summarize(raw, args.top)
        finally:
            proxy.stop()
            up.stop()
    kind = "big" if args.big else "stream" if args.stream else "plain"
    out = HERE / "results" / f"profile_{kind}.json"
    out.write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    print(f"{summary['main_thread_samples']} main-thread samples; shares of those below")
    print(f"other threads: {summary['other_thread_samples']}")
    for title in ("inclusive_proxy", "self"):
        print(f"\n{title}:")
        for frame, pct in summary[title]:
            print(f"  {pct:5.1f}%  {frame}")


if __name__ == "__main__":
    main()
