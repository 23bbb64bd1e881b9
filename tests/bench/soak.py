"""Benchmark: soak — a mixed, hostile load for a bounded time; the proxy's memory must not grow.

Run: /work/venv/bin/python tests/bench/soak.py [--duration 60] [--concurrency 16]

Starts the fast fake upstream and `python -m proxy serve` (1 worker, a 2000-token window for
gpt-4o so that some requests are trimmed) as processes on loopback, then runs a mix for
`--duration` seconds: plain and streamed, small and trimmed, clients that disconnect
mid-stream, bad bodies (400), unknown routes (404) and passthrough GETs. RSS (VmRSS from
/proc) and open file descriptors of the proxy are sampled every second. Verdict: RSS growth
from the end of the warm-up (the first quarter) to the end stays under `--max-growth-mb`,
descriptors end no higher than after warm-up, and the usage log has one row per chat request.
Questions come from a pool of QUESTIONS texts (see there).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
PY = sys.executable

from procs import Server, free_port, rss_mb  # noqa: E402

FILLER = " ".join(f"word{i}" for i in range(250))
KINDS = [
    ("plain", 40),
    ("stream", 25),
    ("plain_trimmed", 10),
    ("stream_trimmed", 10),
    ("disconnect", 5),
    ("bad_body", 4),
    ("not_found", 3),
    ("passthrough", 3),
]


# Distinct questions, asked in turn: texts repeat as real clients' do, so the proxy's caches
# (counts, relevance's terms, ids) reach their steady state within the warm-up, and what
# grows after it is state kept per request. With a new text every request they fill for
# half a million requests (their bounds are entries and bytes, tested in tests/): the
# check then measured caches filling (+13 MB over 179k requests), not a leak.
QUESTIONS = 5_000


def body(kind: str, n: int) -> dict[str, object]:
    messages = [{"role": "user", "content": f"question {n % QUESTIONS}?"}]
    if kind.endswith("trimmed"):
        history = [
            {"role": "user" if t % 2 == 0 else "assistant", "content": f"{t} {FILLER}"}
            for t in range(10)
        ]
        messages = history + messages
    return {
        "model": "gpt-4o",
        "messages": messages,
        "stream": kind.startswith(("stream", "disconnect")),
    }


async def one(client: httpx.AsyncClient, kind: str, n: int) -> str:
    """Send one request of `kind`; the outcome as a short label."""
    try:
        if kind == "bad_body":
            r = await client.post("/v1/chat/completions", content=b'{"model": 5')
            return str(r.status_code)
        if kind == "not_found":
            return str((await client.get("/nope")).status_code)
        if kind == "passthrough":
            return str((await client.get("/v1/models")).status_code)
        async with client.stream("POST", "/v1/chat/completions", json=body(kind, n)) as r:
            if kind == "disconnect":
                async for _ in r.aiter_raw():
                    break  # and leave: the context manager closes the connection
                return "disconnected"
            raw = await r.aread()
            ok = r.status_code == 200 and (
                not kind.startswith("stream") or raw.endswith(b"[DONE]\n\n")
            )
            return "200" if ok else f"bad {r.status_code}"
    except httpx.HTTPError as exc:
        return type(exc).__name__


async def drive(port: int, seconds: float, concurrency: int, on_tick: object) -> Counter[str]:
    outcomes: Counter[str] = Counter()
    names, weights = zip(*KINDS, strict=True)
    rng = random.Random(7)
    stop_at = time.monotonic() + seconds
    counter = iter(range(10**9))

    async def worker() -> None:
        limits = httpx.Limits(max_connections=2)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=10, limits=limits
        ) as client:
            while time.monotonic() < stop_at:
                kind = rng.choices(names, weights)[0]
                outcomes[f"{kind}:{await one(client, kind, next(counter))}"] += 1

    async def ticker() -> None:
        while time.monotonic() < stop_at:
            await asyncio.sleep(1.0)
            on_tick(sum(outcomes.values()))  # type: ignore[operator]

    await asyncio.gather(ticker(), *(worker() for _ in range(concurrency)))
    return outcomes


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-growth-mb", type=float, default=10.0)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="soak-"))
    policies = tmp / "policies"
    policies.mkdir()
    (policies / "default.yaml").write_text("models: {gpt-4o: {context_window: 2000}}\n")
    usage = tmp / "usage.jsonl"
    up_port, port = free_port(), free_port()
    upstream = Server(
        "fake upstream",
        [PY, str(HERE / "fake_upstream_server.py"), "--port", str(up_port)],
        up_port,
        "/healthz",
        log=tmp / "upstream.log",
    )
    proxy = Server(
        "context-proxy",
        [
            PY,
            "-m",
            "proxy",
            "serve",
            "--port",
            str(port),
            "--policies",
            str(policies),
            "--upstream",
            f"http://127.0.0.1:{up_port}/v1",
            "--usage-log",
            str(usage),
        ],
        port,
        "/healthz",
        {"PYTHONPATH": str(ROOT)},
        tmp / "proxy.log",
    )
    upstream.start()
    proxy.start()
    samples: list[tuple[float, int, float, int]] = []
    began = time.monotonic()
    fds_start = fd_count(proxy.pid)

    def tick(done: int) -> None:
        samples.append((time.monotonic() - began, done, rss_mb(proxy.pid), fd_count(proxy.pid)))

    try:
        tick(0)
        outcomes = asyncio.run(drive(port, args.duration, args.concurrency, tick))
        time.sleep(1.0)  # let disconnects and the usage writer settle
        tick(sum(outcomes.values()))
        fds_end = fd_count(proxy.pid)
    finally:
        proxy.stop()
        upstream.stop()

    print(f"soak: {args.duration:g} s, {args.concurrency} clients, 1 worker; logs in {tmp}\n")
    print("| t (s) | requests | RSS MB | open fds |\n|---|---|---|---|")
    step = max(1, len(samples) // 15)
    for t, done, rss, fds in samples[::step] + ([samples[-1]] if (len(samples) - 1) % step else []):
        print(f"| {t:.0f} | {done:,} | {rss:.1f} | {fds} |")
    total = sum(outcomes.values())
    print(f"\nrequests: {total:,} ({total / args.duration:,.0f}/s)")
    for label, count in sorted(outcomes.items()):
        print(f"  {label}: {count:,}")

    warm = next(s for s in samples if s[0] >= args.duration / 4)
    growth = samples[-1][2] - warm[2]
    chat_sent = sum(
        c
        for label, c in outcomes.items()
        if label.split(":")[0]
        in ("plain", "stream", "plain_trimmed", "stream_trimmed", "disconnect", "bad_body")
    )
    rows = [orjson.loads(line) for line in usage.read_bytes().splitlines()]
    chat_rows = [r for r in rows if r.get("kind") == "chat"]
    failures = [
        label for label in outcomes if not label.endswith((":200", ":disconnected", ":400", ":404"))
    ]
    checks = [
        (
            f"RSS growth after warm-up < {args.max_growth_mb:g} MB",
            f"{growth:+.1f} MB ({warm[2]:.1f} -> {samples[-1][2]:.1f})",
            growth < args.max_growth_mb,
        ),
        # After warm-up the count includes the pooled keep-alive connections to the upstream.
        (
            "open fds not above warm-up",
            f"{fds_start} at start, {warm[3]} warm, {fds_end} at end",
            fds_end <= warm[3],
        ),
        (
            "one usage row per chat request",
            f"{len(chat_rows):,} rows / {chat_sent:,} requests",
            len(chat_rows) == chat_sent,
        ),
        ("no unexpected outcomes", ", ".join(failures) or "none", not failures),
    ]
    print("\n| check | measured | met |\n|---|---|---|")
    for name, measured, met in checks:
        print(f"| {name} | {measured} | {'yes' if met else '**no**'} |")
    return 0 if all(met for *_, met in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
