"""Benchmark: what a hostile body costs the proxy, in memory and in event-loop time.

Run: python tests/bench/bench_hostile.py [--no-write]

Starts the fake upstream and `python -m proxy serve` (one worker) on loopback and sends each
body below while a probe asks `/healthz` every 10 ms and a sampler reads the proxy's RSS
(VmRSS) every 5 ms. Per body: the answer's status, the RSS growth over its size (the bound:
16x), and the longest /healthz answer while it was handled (the event loop's stall; the
bound for bodies under 1 MiB: 100 ms), beside the longest /healthz answer of an idle proxy
measured in the same run (the machine's own noise). Three ~1 MB chats go first, unmeasured:
what a chat's words and counts leave in the bounded caches for its next turn is counted
from the first of them on, not charged to one body. Writes results/hostile.json and its
table in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
PY = sys.executable

from procs import Server, free_port, get, post, rss_mb, write_doc_section  # noqa: E402

RESULTS = HERE / "results" / "hostile.json"
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench_hostile: begin -->", "<!-- bench_hostile: end -->"
MiB = 1024 * 1024


def empty_parts(route: str, size: int) -> bytes:
    parts = b",".join([b"{}"] * (size // 3))
    key = b"messages" if route == "/v1/chat/completions" else b"input"
    return b'{"model":"gpt-4o","' + key + b'":[{"role":"user","content":[' + parts + b"]}]}"


def text_parts(count: int) -> bytes:
    part = b'{"type":"input_text","text":"a b"}'
    body = b'{"model":"gpt-4o","input":[{"role":"user","content":[' + b",".join([part] * count)
    return body + b"]}]}"


def chat(turns: int, seed: str, words: int = 60) -> list[dict[str, str]]:
    return [
        {"role": "user" if t % 2 == 0 else "assistant",
         "content": " ".join(f"{seed}{t}w{k}" for k in range(words))}
        for t in range(turns)
    ]  # fmt: skip


def tiny_values(value: bytes, size: int) -> bytes:
    """A chat carrying `size` bytes of one tiny JSON value repeated (an extra field): the
    most values a parser must build per byte."""
    values = b",".join([value] * (size // (len(value) + 1)))
    return (
        b'{"model":"gpt-4o","x_pad":[' + values + b'],"messages":[{"role":"user","content":"hi"}]}'
    )


def messages_body(turns: int) -> bytes:
    messages = [{"role": m["role"], "content": [{"type": "text", "text": m["content"]}]}
                for m in chat(turns, "count")]  # fmt: skip
    return orjson.dumps({"model": "claude-sonnet-4-5", "messages": messages})


def sampled_places(known: list[dict[str, str]]) -> bytes:
    """A ~1 MB chat whose every place a 16-message sample would look at holds a message
    counted before (`known`), the rest never seen."""
    messages = chat(1150, "fresh")
    step = (len(messages) - 2) // 16
    for n, at in enumerate(range(0, len(messages) - 2, step)):
        messages[at] = known[n % len(known)]
    return orjson.dumps({"model": "gpt-4o", "messages": messages})


class Watch:
    """The probe and the sampler, while one body is handled."""

    def __init__(self, port: int, pid: int) -> None:
        self.port, self.pid = port, pid
        self.stall = 0.0
        self.peak = 0.0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._probe), threading.Thread(target=self._rss)]

    def __enter__(self) -> Watch:
        self.base = rss_mb(self.pid)
        self.peak = self.base
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()

    def _probe(self) -> None:
        while not self._stop.is_set():
            began = time.perf_counter()
            with contextlib.suppress(OSError):
                get(self.port, "/healthz", timeout=30)
            self.stall = max(self.stall, time.perf_counter() - began)
            time.sleep(0.01)

    def _rss(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb(self.pid))
            time.sleep(0.005)


def run() -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    policies = tmp / "policies"
    policies.mkdir()
    (policies / "default.yaml").write_text("models:\n  gpt-4o: {context_window: 8000}\n")
    up_port, port = free_port(), free_port()
    upstream = Server(
        "fake upstream",
        [PY, str(HERE / "fake_upstream_server.py"), "--port", str(up_port)],
        up_port, "/healthz", log=tmp / "upstream.log",
    )  # fmt: skip
    proxy = Server(
        "context-proxy",
        [PY, "-m", "proxy", "serve", "--port", str(port), "--policies", str(policies),
         "--upstream", f"http://127.0.0.1:{up_port}/v1", "--usage-log", str(tmp / "u.jsonl")],
        port, "/healthz", {"PYTHONPATH": str(ROOT)}, tmp / "proxy.log",
    )  # fmt: skip
    upstream.start()
    proxy.start()
    assert proxy.proc is not None
    pid = proxy.proc.pid
    known = chat(40, "known")
    post(port, "/v1/chat/completions", orjson.dumps({"model": "gpt-4o", "messages": known}))
    # Warm-up: three ~1 MB chats never seen again, so that the caches kept for next turns
    # (counts, terms: bounded, term_index.py) hold something before the bodies are measured.
    for n in range(3):
        warm = {"model": "gpt-4o", "messages": chat(1150, f"warm{n}x")}
        post(port, "/v1/chat/completions", orjson.dumps(warm))
    cases: list[tuple[str, str, Callable[[], bytes], int]] = [
        ("16 MiB of empty parts, Responses", "/v1/responses", lambda: empty_parts("/v1/responses", 16 * MiB), 1),
        ("16 MiB of empty parts, chat", "/v1/chat/completions", lambda: empty_parts("/v1/chat/completions", 16 * MiB), 1),
        ("990 KB of empty parts, Responses", "/v1/responses", lambda: empty_parts("/v1/responses", 990_000), 1),
        ("990 KB of empty parts, 4 at once", "/v1/responses", lambda: empty_parts("/v1/responses", 990_000), 4),
        ("990 KB of 28k text parts, Responses", "/v1/responses", lambda: text_parts(28_000), 1),
        ("~1 MB chat, sampled places seen before", "/v1/chat/completions", lambda: sampled_places(known), 1),
        ("~1 MB chat, first look", "/v1/chat/completions", lambda: orjson.dumps({"model": "gpt-4o", "messages": chat(1150, "new")}), 1),
        ("31 MB of one-character strings, chat", "/v1/chat/completions", lambda: tiny_values(b'"a"', 31_000_000), 1),
        ("31 MB of one-digit numbers, chat", "/v1/chat/completions", lambda: tiny_values(b"1", 31_000_000), 1),
        ("31 MB chat, one request", "/v1/chat/completions", lambda: orjson.dumps({"model": "gpt-4o", "messages": chat(39_000, "huge")}), 1),
        ("12 MB count_tokens", "/v1/messages/count_tokens", lambda: messages_body(17_000), 1),
        ("10 MiB chat, 4 at once", "/v1/chat/completions", lambda: orjson.dumps({"model": "gpt-4o", "messages": chat(14_000, "big")}), 4),
    ]  # fmt: skip
    try:
        with Watch(port, pid) as idle:
            time.sleep(2.0)
        rows = []
        for name, route, make, copies in cases:
            body = make()
            statuses: list[int] = []
            began = time.perf_counter()

            def send(route: str = route, body: bytes = body, got: list[int] = statuses) -> None:
                got.append(post(port, route, body)[0])

            with Watch(port, pid) as watch:
                senders = [threading.Thread(target=send) for _ in range(copies)]
                for s in senders:
                    s.start()
                for s in senders:
                    s.join()
            took = time.perf_counter() - began
            growth = max(0.0, watch.peak - watch.base)
            rows.append({
                "body": name, "bytes": len(body), "copies": copies, "statuses": sorted(set(statuses)),
                "rss_growth_mb": round(growth, 1),
                "rss_growth_per_body_byte": round(growth * MiB / (len(body) * copies), 2),
                "max_healthz_ms": round(watch.stall * 1000, 1), "seconds": round(took, 2),
            })  # fmt: skip
            print(rows[-1], flush=True)
    finally:
        proxy.stop()
        upstream.stop()
    return {"idle_max_healthz_ms": round(idle.stall * 1000, 1), "rows": rows}


def table(results: dict[str, Any]) -> str:
    lines = [
        f"Idle proxy, longest /healthz answer over 2 s: {results['idle_max_healthz_ms']} ms.",
        "",
        "| body | size | at once | status | RSS growth | growth / body size | longest /healthz | time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        lines.append(
            f"| {r['body']} | {r['bytes']:,} B | {r['copies']} | {', '.join(map(str, r['statuses']))} "
            f"| {r['rss_growth_mb']} MB | {r['rss_growth_per_body_byte']}x | {r['max_healthz_ms']} ms "
            f"| {r['seconds']} s |"
        )
    return "\n".join(lines)


def write_doc(results: dict[str, Any]) -> None:
    write_doc_section(
        DOC,
        (BEGIN, END),
        "Hostile bodies: memory and event-loop time",
        "python tests/bench/bench_hostile.py",
        table(results),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    results = run()
    print(table(results))
    if not args.no_write:
        RESULTS.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
        write_doc(results)


if __name__ == "__main__":
    main()
