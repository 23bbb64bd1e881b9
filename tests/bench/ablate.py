"""Benchmark step 9: what a recommended hot-path change would save, measured by patching it in.

Run: /work/venv/bin/python tests/bench/ablate.py [--requests 2000] [--stream] [--only a,b]

asgi_micro.py's measurement (the proxy's app in process, small requests, the fast fake
upstream) with one step of the proxy replaced, in this process only, by what the change
would leave of it (or by nothing: an upper bound on the saving). proxy/ is not edited.
Each variant runs in a fresh event loop and app, all in rotation for --rounds; the
saving is the median against the unpatched app's median in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import aiohttp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from asgi_micro import measure  # noqa: E402
from loadgen import chat_body  # noqa: E402
from overhead import fake_upstream  # noqa: E402

from proxy import handlers  # noqa: E402
from proxy.server.app.app import create_app  # noqa: E402
from proxy.server.core.settings import Settings  # noqa: E402
from proxy.server.pipeline.disconnect import DisconnectWatch  # noqa: E402
from proxy.types import Level  # noqa: E402
from proxy.upstream.client import Timeouts, Upstream, UpstreamResponse  # noqa: E402
from proxy.usage.metrics import Metrics  # noqa: E402
from proxy.usage.quotas import QuotaBook, QuotaStatus  # noqa: E402
from proxy.usage.writer import UsageLog  # noqa: E402

WAKE_AFTER_S = 0.05


def _wake_batched(self: UsageLog) -> None:
    """The writer woken at most every WAKE_AFTER_S by one timer, not after every request."""
    if getattr(self, "_bench_timer", None) is not None:
        return

    def fire() -> None:
        self._bench_timer = None  # type: ignore[attr-defined]
        self._wakeup.set()

    self._bench_timer = asyncio.get_running_loop().call_later(WAKE_AFTER_S, fire)  # type: ignore[attr-defined]


@contextlib.asynccontextmanager
async def _no_watch(request: Any) -> AsyncIterator[DisconnectWatch]:
    yield DisconnectWatch()


async def _lean_send_once(
    self: Upstream,
    method: str,
    url: Any,
    headers: list[tuple[str, str]],
    body: Any,
    timeouts: Timeouts,
    streaming: bool,
) -> UpstreamResponse:
    """Recommendation 5: a plain dict of headers, no per-read timer for plain answers (one
    ClientTimeout per setting, as now); the error mapping is left out (none happens here)."""
    key = ("lean", timeouts, streaming)
    timeout = self._timeouts.get(key)  # type: ignore[arg-type]
    if timeout is None:
        read = timeouts.total_s if streaming else None
        timeout = aiohttp.ClientTimeout(
            total=None if streaming else timeouts.total_s,
            sock_connect=timeouts.connect_s,
            sock_read=read,
        )
        self._timeouts[key] = timeout  # type: ignore[index]
    response = await self._session.request(
        method, url, headers=dict(headers), data=body, timeout=timeout, allow_redirects=False
    )
    return UpstreamResponse(response, self._max_answer_bytes)


async def _lean_read(self: UpstreamResponse) -> bytes:
    """Recommendation 5: one read() when the declared length is under the cap."""
    declared = self._response.content_length
    if declared is not None and declared <= self._max_answer_bytes:
        async with self._response:
            return await self._response.read()
    return await _READ(self)


_READ = UpstreamResponse.read
_NO_QUOTA = QuotaStatus(0, None, Level.NORMAL, False, None)

# name -> (what it stands for, the patches)
VARIANTS: dict[str, tuple[str, Callable[[], list[Any]]]] = {
    "wake": (
        "usage writer woken by a 50 ms timer, not per request",
        lambda: [mock.patch.object(UsageLog, "_wake_soon", _wake_batched)],
    ),
    "quota": (
        "no quota bookkeeping (policy without quotas): add/status skipped",
        lambda: [
            mock.patch.object(QuotaBook, "add", lambda *a, **k: None),
            mock.patch.object(QuotaBook, "status", lambda *a, **k: _NO_QUOTA),
        ],
    ),
    "metrics": (
        "no per-request metrics update (upper bound)",
        lambda: [mock.patch.object(Metrics, "observe_record", lambda *a, **k: None)],
    ),
    "disconnect": (
        "no disconnect listener task (upper bound of arming it late)",
        lambda: [mock.patch.object(handlers, "cancel_on_disconnect", _no_watch)],
    ),
    "upstream": (
        "upstream call: dict headers, no sock_read timer for plain, read() when length known",
        lambda: [
            mock.patch.object(Upstream, "_send_once", _lean_send_once),
            mock.patch.object(UpstreamResponse, "read", _lean_read),
        ],
    ),
    "usage_row": (
        "no usage row written at all (upper bound: record, JSON, hand-off, wake)",
        lambda: [mock.patch.object(UsageLog, "write", lambda *a, **k: None)],
    ),
}


@contextlib.contextmanager
def patched(names: list[str]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for name in names:
            for patch in VARIANTS[name][1]():
                stack.enter_context(patch)
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(VARIANTS), help="variants, comma-separated")
    args = parser.parse_args()
    import uvloop

    names = [n for n in args.only.split(",") if n]
    body = chat_body(args.stream)
    with tempfile.TemporaryDirectory(prefix="bench-ablate-") as name:
        tmp = Path(name)
        (tmp / "policies").mkdir()
        (tmp / "policies" / "default.yaml").write_text("")
        up = fake_upstream(tmp).start()
        try:
            env = {
                "CONTEXT_PROXY_UPSTREAM": f"http://127.0.0.1:{up.port}/v1",
                "CONTEXT_PROXY_POLICIES": str(tmp / "policies"),
                "CONTEXT_PROXY_USAGE_LOG": str(tmp / "usage.jsonl"),
            }

            def run(variant: list[str]) -> float:
                with patched(variant):
                    app = create_app(Settings.from_env(env))
                    return float(uvloop.run(measure(app, body, args.requests, None)))

            variants = [[]] + [[n] for n in names] + ([names] if len(names) > 1 else [])
            spent: dict[int, list[float]] = {i: [] for i in range(len(variants))}
            for _ in range(args.rounds):  # in rotation: a burst of outside load hits all
                for i, variant in enumerate(variants):
                    spent[i].append(run(variant))
            base = statistics.median(spent[0])
            mode = "stream" if args.stream else "plain"
            print(f"{mode}: proxy app {base:.0f} µs/request (median of {args.rounds})\n")
            print("| change | µs/request | saving |\n|---|---|---|")
            for i, variant in enumerate(variants[1:], 1):
                label = VARIANTS[variant[0]][0] if len(variant) == 1 else "all of the above"
                mine = statistics.median(spent[i])
                print(f"| {label} | {mine:.0f} | {base - mine:+.0f} |")
        finally:
            up.stop()


if __name__ == "__main__":
    main()
