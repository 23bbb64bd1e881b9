"""Where a big request's time goes inside the proxy: timers around each step of the pipeline.

Run: /work/venv/bin/python tests/bench/proxy_phases.py [--requests 60] [--quantile 0.5]

Starts the fast fake upstream and the proxy (one worker) with timers wrapped around the
handler's steps (read body, parse, plan with its thread hop, forwarded payload, upstream
send and read, usage record, answer), then sends bench_trim.py's next turn (600 messages,
292 KB, trimmed every time) one request at a time, each also straight to the upstream.
Prints, per step, the chosen quantile of its duration over the requests, the time spent
in garbage collection, and what the proxy adds end to end beyond plan_request itself.
Sequential requests only: the timers keep one request's marks at a time.
"""

from __future__ import annotations

import argparse
import functools
import gc
import inspect
import itertools
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

# (mark, label): consecutive marks bound one step; the label names the step they end.
STEPS = [
    ("app<", ""),
    ("read<", "routing, Exchange"),
    ("read>", "read_body"),
    ("parse>", "parse_chat_body (orjson + checks)"),
    ("plan<", "quota, tokenizer, summary lookup"),
    ("planreq<", "thread hop out, if any (+ window lookup)"),
    ("planreq>", "plan_request"),
    ("plan>", "thread hop back"),
    ("payload>", "forwarded_payload"),
    ("send<", "headers, auth, target"),
    ("send>", "upstream send, until its headers"),
    ("uread>", "upstream body read"),
    ("finish>", "finish_plain (usage row, metrics, response)"),
    ("start", "back to Starlette, answer start"),
    ("sent", "answer body sent"),
    ("app>", "after the answer (freeing the request)"),
]


def serve_timed(out: Path, argv: list[str]) -> int:
    """`python -m proxy serve ...` with timers; writes one JSON row per request at exit."""
    import atexit

    import proxy.server.app.app as app_mod
    import proxy.server.dialects.chat as h
    import proxy.server.pipeline.plan_step as ps
    from proxy.cli.main import main as cli_main
    from proxy.upstream.client import Upstream, UpstreamResponse

    rows: list[dict[str, float]] = []
    cur: dict[str, float] = {}
    gc_start = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_start[0] = time.perf_counter()
        else:
            cur["gc"] = cur.get("gc", 0.0) + time.perf_counter() - gc_start[0]

    gc.callbacks.append(on_gc)

    def timed(owner: Any, name: str, before: str | None, after: str) -> None:
        fn: Callable[..., Any] = getattr(owner, name)
        if inspect.iscoroutinefunction(fn):

            async def awrap(*a: Any, **k: Any) -> Any:
                if before:
                    cur[before] = time.perf_counter()
                try:
                    return await fn(*a, **k)
                finally:
                    cur[after] = time.perf_counter()

            setattr(owner, name, functools.wraps(fn)(awrap))
            return

        def wrap(*a: Any, **k: Any) -> Any:
            if before:
                cur[before] = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                cur[after] = time.perf_counter()

        setattr(owner, name, functools.wraps(fn)(wrap))

    timed(h, "read_body", "read<", "read>")
    timed(h, "parse_chat_body", None, "parse>")
    timed(h, "plan", "plan<", "plan>")
    timed(ps, "plan_request", "planreq<", "planreq>")
    timed(h, "forwarded_payload", None, "payload>")
    timed(Upstream, "send", "send<", "send>")
    timed(UpstreamResponse, "read", None, "uread>")
    timed(h, "finish_plain", None, "finish>")
    factory = app_mod.app_from_env

    def timed_factory() -> Any:
        app = factory()

        async def asgi(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http" or not scope["path"].endswith("/chat/completions"):
                return await app(scope, receive, send)
            cur.clear()
            cur["gc"] = 0.0
            cur["app<"] = time.perf_counter()

            async def send_timed(message: Any) -> None:
                if message["type"] == "http.response.start":
                    cur["start"] = time.perf_counter()
                await send(message)
                if message["type"] == "http.response.body" and not message.get("more_body"):
                    cur["sent"] = time.perf_counter()

            await app(scope, receive, send_timed)
            cur["app>"] = time.perf_counter()
            rows.append(dict(cur))

        return asgi

    app_mod.app_from_env = timed_factory  # type: ignore[assignment]
    atexit.register(lambda: out.write_bytes(orjson.dumps(rows)))
    return cli_main(argv)


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[round(q * (len(xs) - 1))] if xs else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--quantile", type=float, default=0.5)
    args = parser.parse_args()
    from bench_tokens import conversation
    from bench_trim import next_turn
    from overhead import context_proxy, fake_upstream
    from procs import post

    raw = orjson.dumps({"model": "gpt-4o", "messages": conversation()})
    bodies = [next_turn(raw, turn) for turn in range(args.requests)]
    q = args.quantile
    with tempfile.TemporaryDirectory(prefix="bench-phases-") as name:
        tmp = Path(name)
        up = fake_upstream(tmp).start()
        proxy = context_proxy(tmp, up.port, 1)
        # The same `serve ...` flags, run through serve_timed instead of `-m proxy`.
        serve = proxy.cmd[proxy.cmd.index("serve") :]
        proxy.cmd = [sys.executable, __file__, "--serve-timed", str(tmp / "rows.json"), *serve]
        proxy.start()
        client, direct = [], []
        try:
            post(proxy.port, "/v1/chat/completions", raw)  # the previous turn (loads o200k)
            for body in bodies:
                for port, out in ((proxy.port, client), (up.port, direct)):
                    start = time.perf_counter()
                    status, _, answer = post(port, "/v1/chat/completions", body)
                    out.append(time.perf_counter() - start)
                    if status != 200:
                        raise RuntimeError(f"{status}: {answer[:300]!r}")
        finally:
            proxy.stop()
            up.stop()
        rows = orjson.loads((tmp / "rows.json").read_bytes())[1:]
    print(f"{len(rows)} next turns, quantile {q} of each step (ms)\n")
    print(f"| {'step':<44} | ms |\n|{'-' * 46}|---|")
    for (a, _), (b, label) in itertools.pairwise(STEPS):
        spans = [r[b] - r[a] for r in rows if a in r and b in r]
        print(f"| {label:<44} | {quantile(spans, q) * 1000:.3f} |")
    plan = quantile([r["planreq>"] - r["planreq<"] for r in rows], q)
    added = quantile(client, q) - quantile(direct, q)
    totals = [
        ("whole request in the app", quantile([r["app>"] - r["app<"] for r in rows], q)),
        ("  of which plan_request", plan),
        ("  until sent, minus plan_request", quantile([until_sent(r) for r in rows], q)),
        ("garbage collection (all threads)", quantile([r["gc"] for r in rows], q)),
        ("end to end: proxy - direct", added),
        ("end to end: added beyond plan_request", added - plan),
    ]
    for label, seconds in totals:
        print(f"| {label:<44} | {seconds * 1000:.3f} |")


def until_sent(row: dict[str, float]) -> float:
    return row["sent"] - row["app<"] - (row["planreq>"] - row["planreq<"])


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--serve-timed":
        os.environ.setdefault("PYTHONPATH", str(HERE.parents[1]))
        sys.exit(serve_timed(Path(sys.argv[2]), sys.argv[3:]))
    main()
