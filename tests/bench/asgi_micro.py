"""Benchmark step 8: the proxy's app and the relay's, driven as ASGI apps in one process.

Run: /work/venv/bin/python tests/bench/asgi_micro.py [--requests 2000] [--stream]
     [--profile N]  (cProfile: the N heaviest functions of the proxy, cumulative)

Without uvicorn, sockets to the client, or other servers' load in between: the same small
request goes to create_app(settings) (the proxy, as `serve` builds it, usage log and
all) and to relay.py's app, one at a time, each forwarding to the fast fake upstream
(its own process). The CPU per request of this process (time.process_time) is the app's
own cost plus its upstream client's; the difference between the two is the proxy's
extra work per request, measured on a core the load generator does not share.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from loadgen import chat_body  # noqa: E402
from overhead import fake_upstream  # noqa: E402
from relay import create_app as relay_app  # noqa: E402

from proxy.server.app.app import create_app  # noqa: E402
from proxy.server.core.settings import Settings  # noqa: E402

HEADERS = [
    (b"host", b"127.0.0.1"),
    (b"content-type", b"application/json"),
    (b"authorization", b"Bearer sk-bench-not-a-real-key"),
]


async def one(app: Any, body: bytes) -> int:
    """One request through the ASGI app; the status it answered."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [*HEADERS, (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    sent = False
    never = asyncio.get_running_loop().create_future()  # no disconnect: wait for ever
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await never
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    never.cancel()
    return status


async def measure(app: Any, body: bytes, n: int, profile: cProfile.Profile | None) -> float:
    async with app.router.lifespan_context(app):
        for _ in range(200):  # warm: pools, caches, lazy loads
            assert await one(app, body) == 200
        best = float("inf")
        for _ in range(3):
            began = time.process_time()
            if profile:
                profile.enable()
            for _ in range(n):
                await one(app, body)
            if profile:
                profile.disable()
            best = min(best, time.process_time() - began)
    return 1e6 * best / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--profile", type=int, default=0, help="print the N heaviest")
    args = parser.parse_args()
    import uvloop

    body = chat_body(args.stream)
    with tempfile.TemporaryDirectory(prefix="bench-asgi-") as name:
        tmp = Path(name)
        (tmp / "policies").mkdir()
        (tmp / "policies" / "default.yaml").write_text("")
        up = fake_upstream(tmp).start()
        try:
            base = f"http://127.0.0.1:{up.port}/v1"
            env = {"UPSTREAM": base, "POLICIES": str(tmp / "policies")}
            env["USAGE_LOG"] = str(tmp / "usage.jsonl")
            settings = Settings.from_env({f"CONTEXT_PROXY_{k}": v for k, v in env.items()})
            relay = uvloop.run(measure(relay_app(base), body, args.requests, None))
            profile = cProfile.Profile() if args.profile else None
            proxy = uvloop.run(measure(create_app(settings), body, args.requests, profile))
        finally:
            up.stop()
    mode = "stream" if args.stream else "plain"
    print(
        f"{mode}: CPU per request, app + its upstream client, no server: relay {relay:.0f} µs, "
        f"proxy {proxy:.0f} µs ({proxy / relay:.2f}×, +{proxy - relay:.0f} µs)"
    )
    if profile:
        print("(times below are under cProfile, which inflates small calls)")
        pstats.Stats(profile).sort_stats("cumulative").print_stats("/proxy/", args.profile)


if __name__ == "__main__":
    main()
