"""Recall that no model can turn against the server: a model that calls `context_recall`
200 times in one answer against a 1,200-message conversation gets a bounded number of
calls served (the rest answered with a tool error it can read), the lookups run off the
event loop (/healthz answers within 250 ms throughout), and the client gets an answer."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.recall import MAX_CALLS
from proxy.server.core.settings import Settings
from tests import fake_recall
from tests.conftest import RunningProxy, free_port
from tests.fake_recall import STORM
from tests.fake_upstream import FakeUpstream
from tests.processes import serve_command, wait_ready
from tests.server.test_proxy_e2e import usage_rows

WINDOW = 64_000  # the 1,200 messages are over its budget; 200 calls fit beside them
TOPICS = ("weather", "garden", "vault", "river", "budget", "train", "music", "letters")
HEALTHZ_BOUND_S = 0.25  # the bound the server must keep, whatever a model asks


def long_chat(messages: int = 1200) -> list[dict[str, Any]]:
    """A conversation of `messages` messages (a system prompt, then turns) whose turns
    speak of different things, so every query has something to score."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    turn = 0
    while len(out) < messages - 1:
        topic = TOPICS[turn % len(TOPICS)]
        out.append({"role": "user", "content": f"Turn {turn} about the {topic}: "
                    + f"the {topic} number {turn * 7} was noted beside item {turn}. " * 4})  # fmt: skip
        out.append({"role": "assistant", "content": f"Noted the {topic} at {turn}. " * 6})
        turn += 1
    out.append({"role": "user", "content": "What did I say about the vault and the river?"})
    return out


def policy(policies_dir: Path, extra: str = "", window: int = WINDOW) -> None:
    (policies_dir / "default.yaml").write_text(
        f"models:\n  gpt-4o-mini: {{context_window: {window}}}\n{extra}"
    )


PROBE = """
import sys, time, httpx
worst, count = 0.0, 0
with httpx.Client(timeout=30) as http:
    while not sys.stdin.readline().startswith("stop"):
        started = time.perf_counter()
        assert http.get(sys.argv[1] + "/healthz").status_code == 200
        worst, count = max(worst, time.perf_counter() - started), count + 1
print(count, worst)
"""


class Prober:
    """Polls /healthz while a request runs, from a process of its own (whatever this one
    is busy with, a fake upstream, the answers, is not counted); the slowest answer."""

    def __init__(self, url: str) -> None:
        self.url, self.worst, self.count = url, 0.0, 0
        self._stop = threading.Event()

    def __enter__(self) -> Prober:
        self._process = subprocess.Popen(
            [sys.executable, "-c", PROBE, self.url],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self._thread = threading.Thread(target=self._tick, daemon=True)
        self._thread.start()
        return self

    def _tick(self) -> None:
        assert self._process.stdin is not None
        while not self._stop.wait(0.02):  # one probe per line, every 20 ms
            self._process.stdin.write("go\n")
            self._process.stdin.flush()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        out, _ = self._process.communicate("stop\n", timeout=30)
        count, worst = out.split()
        self.count, self.worst = int(count), float(worst)


def tool_answers(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m.get("role") == "tool"]


@pytest.fixture
def proxy_process(
    tmp_path: Path, upstream_url: str, policies_dir: Path
) -> Iterator[Callable[[], RunningProxy]]:
    """The proxy as `serve` runs it, a process of its own: what /healthz takes is the
    server's alone, not this process's (its fake upstream, its heap of earlier tests)."""
    started: list[subprocess.Popen[bytes]] = []

    def start() -> RunningProxy:
        port, usage = free_port(), tmp_path / "usage.jsonl"
        process = subprocess.Popen(
            serve_command(port, policies_dir, upstream_url, usage),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            cwd=Path(__file__).resolve().parents[2],
        )  # fmt: skip
        started.append(process)
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, process)
        return RunningProxy(url, Settings(policies=str(policies_dir), usage_log=str(usage)))

    yield start
    for process in started:
        process.terminate()
        process.wait(30)


@pytest.mark.parametrize("stream", [False, True])
def test_two_hundred_calls_in_one_answer_stall_nothing_and_are_served_to_the_cap(
    proxy_process: Callable[[], RunningProxy], upstream: FakeUpstream, policies_dir: Path,
    stream: bool,
) -> None:  # fmt: skip
    """200 calls against 1,200 messages used to block /healthz for 11-25 s: each call
    scored the whole conversation again, on the event loop, with no bound on how many."""
    policy(policies_dir, "recall: {rounds: 1}\n")
    upstream.mode = "recall_storm"
    proxy = proxy_process()
    body = {"model": "gpt-4o-mini", "messages": long_chat(), "stream": stream}
    with Prober(proxy.url) as probe, httpx.Client(timeout=120) as http:
        time.sleep(0.1)
        reply = http.post(proxy.url + "/v1/chat/completions", json=body)
        time.sleep(0.1)
    assert reply.status_code == 200, reply.text[:500]
    assert probe.count >= 5
    assert probe.worst < HEALTHZ_BOUND_S, f"/healthz took {probe.worst:.3f} s"
    _, second = (r.json() for r in upstream.chat_requests)
    answers = tool_answers(second)
    assert len(answers) == STORM  # every call answered: the model may read each one
    served = [a for a in answers if "recalled from earlier" in a or "matches" in a]
    refused = [a for a in answers if a.startswith("[context-proxy: not served")]
    assert len(refused) == STORM - MAX_CALLS and len(served) == MAX_CALLS, answers[:3]
    assert "more than" in refused[0] and "context_recall" in refused[0]  # says why, once
    text = reply.text if stream else reply.json()["choices"][0]["message"]["content"]
    assert "RECALLED:" in text
    row = usage_rows(proxy)[-1]
    assert row["recall_rounds"] == 1 and row["status"] == 200


class OneAnswerPerConnection:
    """A raw upstream that answers the first request of a connection and keeps it open,
    then closes it when a second request comes on it (as a server does with a kept-alive
    connection it timed out while the client was busy): the model calls the tool STORM
    times, then answers what it got."""

    def __init__(self) -> None:
        self.port = 0
        self.answered = 0
        self.closed = 0
        self._loop = asyncio.new_event_loop()

    def __enter__(self) -> OneAnswerPerConnection:
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0), self._loop
        ).result(5)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    async def _shutdown(self) -> None:
        self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                size = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
                body = orjson.loads(await reader.readexactly(int(size[1]) if size else 0))
                if served:  # this connection was kept past its time: closed under the client
                    self.closed += 1
                    return
                answer = orjson.dumps(fake_recall.chat_answer(body, "recall_storm"))
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n" % len(answer) + answer)  # fmt: skip
                await writer.drain()
                served += 1
                self.answered += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


def test_a_round_on_a_connection_the_upstream_closed_is_sent_again(
    start_proxy: Any, policies_dir: Path
) -> None:
    """The continuation went on the pooled connection of the round before, which the
    upstream had closed meanwhile: the client used to get the answer so far, which said
    nothing (only calls of the proxy's tool). It is sent once more, on a new connection."""
    policy(policies_dir, "recall: {rounds: 1}\n", window=16_000)
    with OneAnswerPerConnection() as raw:
        proxy = start_proxy(upstream=f"http://127.0.0.1:{raw.port}/v1")
        body = {"model": "gpt-4o-mini", "messages": long_chat(400)}
        reply = httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 200, reply.text[:300]
    assert raw.closed == 1 and raw.answered == 2
    text = reply.json()["choices"][0]["message"]["content"]
    assert text.startswith("RECALLED:"), text[:200]
    assert usage_rows(proxy)[-1]["recall_rounds"] == 1
