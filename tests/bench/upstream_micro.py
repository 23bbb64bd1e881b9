"""Benchmark step 7: the proxy's upstream call against a bare aiohttp post, in one process.

Run: /work/venv/bin/python tests/bench/upstream_micro.py [--requests 3000]

The profile puts the proxy's upstream call at 1.5-2.5x the relay's. Here the same small
body goes to the fast fake upstream, one request at a time, through (a) the relay's code
(`session.post` with two headers, `read()`), (b) proxy.upstream.client.Upstream as the handler
uses it (send + read), and (c) variants of (a) with one of Upstream's settings each, so
the setting that costs can be named. CPU per request is this process's (time.process_time);
the fake upstream runs in its own process.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from multidict import CIMultiDict

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from loadgen import chat_body  # noqa: E402
from overhead import fake_upstream  # noqa: E402

from proxy.upstream.client import Timeouts, Upstream  # noqa: E402

HEADERS = [("authorization", "Bearer sk-bench"), ("content-type", "application/json")]


async def cpu_us(call: Callable[[], Awaitable[bytes]], n: int) -> float:
    for _ in range(200):  # warm: the pooled connection, lazy imports
        await call()
    best = float("inf")
    for _ in range(3):
        began = time.process_time()
        for _ in range(n):
            await call()
        best = min(best, time.process_time() - began)
    return 1e6 * best / n


async def run(url: str, n: int) -> None:
    body = chat_body(False)
    plain = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300), auto_decompress=False
    )
    upstream = Upstream.open()
    timeouts = Timeouts(600.0, 10.0, 0)
    full = aiohttp.ClientTimeout(total=600.0, sock_connect=10.0, sock_read=600.0)

    async def relay_like() -> bytes:
        async with plain.post(url, data=body, headers=dict(HEADERS)) as r:
            return await r.read()

    async def proxy_upstream() -> bytes:
        response = await upstream.send("POST", url, list(HEADERS), body, timeouts, False)
        return await response.read()

    async def with_timeouts() -> bytes:
        async with plain.post(url, data=body, headers=dict(HEADERS), timeout=full) as r:
            return await r.read()

    async def with_multidict() -> bytes:
        async with plain.post(url, data=body, headers=CIMultiDict(HEADERS)) as r:
            return await r.read()

    async def with_iter_any() -> bytes:
        async with plain.post(url, data=body, headers=dict(HEADERS)) as r:
            return b"".join([chunk async for chunk in r.content.iter_any()])

    rows = [
        ("relay: session.post + read()", relay_like),
        ("proxy: Upstream.send + UpstreamResponse.read", proxy_upstream),
        ("relay + ClientTimeout(total, sock_connect, sock_read)", with_timeouts),
        ("relay + CIMultiDict headers", with_multidict),
        ("relay + body read by iter_any()", with_iter_any),
    ]
    print("| upstream call, one at a time | CPU µs per request |\n|---|---|")
    try:
        for name, call in rows:
            print(f"| {name} | {await cpu_us(call, n):.0f} |", flush=True)
    finally:
        await plain.close()
        await upstream.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    import uvloop

    with tempfile.TemporaryDirectory(prefix="bench-upstream-") as name:
        up = fake_upstream(Path(name)).start()
        try:
            url = f"http://127.0.0.1:{up.port}/v1/chat/completions"
            uvloop.run(run(url, args.requests))
        finally:
            up.stop()


if __name__ == "__main__":
    main()
