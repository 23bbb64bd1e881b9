"""End to end: proxy-made summaries against the fake upstream, through a real proxy."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.planner.request import SUMMARY_PREFIX
from proxy.server.app.app import create_app
from proxy.server.core.settings import Settings
from proxy.summaries.summarizer import Summarizer
from tests.conftest import serve
from tests.fake_upstream import FakeUpstream

USER_KEY = "Bearer sk-user-credential"


def policy_text(store: Path, **summaries: Any) -> str:
    options = {"enabled": True, "chunk_turns": 4, "max_tokens": 100, "store": f"sqlite:///{store}"}
    options.update(summaries)
    return (
        "models: {gpt-4o: {context_window: 2000}}\n"
        'history: {keep_recent: 2, relevance: "off"}\n'
        f"summaries: {orjson.dumps(options).decode()}\n"
    )


class Proxy:
    def __init__(self, url: str, app: Any, usage: Path) -> None:
        self.url, self.app, self.usage = url, app, usage

    @property
    def summarizer(self) -> Summarizer:
        return self.app.state.services.summaries  # type: ignore[no-any-return]

    def chat(self, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
        body = {"model": "gpt-4o", "messages": messages, **extra}
        headers = {"authorization": USER_KEY}
        return httpx.post(self.url + "/v1/chat/completions", json=body, headers=headers, timeout=20)

    def rows(self, kind: str | None = None) -> list[dict[str, Any]]:
        lines = self.usage.read_bytes().splitlines() if self.usage.exists() else []
        rows = [orjson.loads(line) for line in lines if line.strip()]
        return [r for r in rows if kind is None or r.get("kind") == kind]


@pytest.fixture
def launch(tmp_path: Path, upstream_url: str) -> Iterator[Callable[[str], Any]]:
    """launch(policy_text) serves a proxy; use it as a context manager to stop it early."""

    @contextmanager
    def start(text: str) -> Iterator[Proxy]:
        folder = tmp_path / "policies"
        folder.mkdir(exist_ok=True)
        (folder / "default.yaml").write_text(text)
        usage = tmp_path / "usage.jsonl"
        settings = Settings(
            policies=str(folder), upstream=upstream_url, usage_log=str(usage), watch_policies=False
        )
        app = create_app(settings)
        with serve(app) as url:
            yield Proxy(url, app, usage)

    yield start


def wait_for(condition: Callable[[], Any], what: str, timeout_s: float = 15.0) -> Any:
    """Poll until `condition()` is truthy (background work ends at its own pace)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def conversation(turns: int = 24) -> list[dict[str, Any]]:
    """About 2,500 tokens of history: over the 1,600-token budget of a 2,000-token window."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    for t in range(turns):
        words = " ".join(f"detail{t}-{i}" for i in range(12))
        out.append({"role": "user", "content": f"Turn {t}: tell me about topic {t}. {words}"})
        out.append(
            {"role": "assistant", "content": f"About topic {t}: {words}. Decided: plan {t}."}
        )
    out.append({"role": "user", "content": "What did we decide about topic 1?"})
    return out


def next_turn(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        *messages,
        {"role": "assistant", "content": "We decided plan 1."},
        {"role": "user", "content": "And about topic 2?"},
    ]


def summaries_in(body: dict[str, Any]) -> list[str]:
    return [
        m["content"]
        for m in body["messages"]
        if m["role"] == "system" and str(m["content"]).startswith(SUMMARY_PREFIX)
    ]


def test_answered_first_then_summary_in_place(
    launch: Any, upstream: FakeUpstream, tmp_path: Path
) -> None:
    upstream.summary_gate.clear()  # summary calls hang until the test lets them go
    with launch(policy_text(tmp_path / "s.db")) as proxy:
        messages = conversation()
        first = proxy.chat(messages)
        assert first.status_code == 200  # answered while the summary call is still held
        assert first.json()["choices"][0]["message"]["content"] == upstream.reply_text
        assert int(first.headers["x-context-trimmed"]) > 0
        held = wait_for(lambda: upstream.summary_active, "a summary call to arrive")
        assert held >= 1 and proxy.rows("summary") == []  # the user's answer came first
        assert summaries_in(upstream.chat_requests[0].json()) == []
        call = upstream.summary_requests[0]
        assert call.headers["authorization"] == USER_KEY  # the request's own credentials
        sent = call.json()
        assert sent["model"] == "gpt-4o" and sent["max_tokens"] == 100
        assert "decision" in sent["messages"][0]["content"]
        upstream.summary_gate.set()
        made = wait_for(
            lambda: (
                len(proxy.rows("summary")) == len(upstream.summary_requests)
                and proxy.rows("summary")
            ),
            "summary usage rows",
        )
        assert all(r["status"] == 200 and r["total_tokens"] == 50 for r in made)
        assert all(r["team"] == "default" and r["usage_source"] == "upstream" for r in made)
        second = proxy.chat(next_turn(messages))
        assert second.status_code == 200
        forwarded = upstream.chat_requests[-1].json()
        assert summaries_in(forwarded) == [SUMMARY_PREFIX + upstream.summary_reply] * len(
            summaries_in(forwarded)
        )
        assert summaries_in(forwarded)
        assert int(second.headers["x-context-trimmed"]) > 0
        chat = wait_for(
            lambda: [
                r for r in proxy.rows("chat") if r["request_id"] == second.headers["x-request-id"]
            ],
            "usage row",
        )
        assert chat[0]["summarized"] > 0


def test_restart_keeps_the_cache(launch: Any, upstream: FakeUpstream, tmp_path: Path) -> None:
    # Per-request planning places every stored summary again (a stable cut may place fewer).
    text = policy_text(tmp_path / "kept.db") + "cache: {enabled: false}\n"
    messages = conversation()
    with launch(text) as proxy:
        assert proxy.chat(messages).status_code == 200
        wait_for(lambda: proxy.summarizer.stats["made"] >= 1, "a summary to be stored")
        made = proxy.summarizer.stats["made"]
    upstream.reset()
    with launch(text) as proxy:
        assert proxy.chat(next_turn(messages)).status_code == 200
        assert len(summaries_in(upstream.chat_requests[0].json())) >= made  # from the file
        assert proxy.summarizer.stats["hits"] >= made


def test_failures_are_contained_and_retried_after_backoff(
    launch: Any, upstream: FakeUpstream, tmp_path: Path
) -> None:
    upstream.summary_status = 500
    with launch(policy_text(tmp_path / "s.db")) as proxy:
        messages = conversation()
        assert proxy.chat(messages).status_code == 200
        stats = proxy.summarizer.stats
        # Every scheduled span is scheduled in one pass, before any call can fail.
        failed = wait_for(
            lambda: (
                stats["failed"] == stats["scheduled"]
                and len(proxy.rows("summary")) == stats["failed"]
                and proxy.rows("summary")
            ),
            "failed summary rows",
        )
        assert len(failed) >= 2
        assert all(r["status"] == 500 and r["error"] == "upstream_500" for r in failed)
        calls = len(upstream.summary_requests)
        assert proxy.chat(messages).status_code == 200  # the same request: all in backoff
        wait_for(lambda: proxy.summarizer.stats["backoff"] >= len(failed), "backoff decisions")
        assert len(upstream.summary_requests) == calls  # not retried yet
        upstream.summary_status = 200
        proxy.summarizer.clock = lambda: time.monotonic() + 7200  # past any backoff
        assert proxy.chat(messages).status_code == 200
        wait_for(lambda: proxy.summarizer.stats["made"] >= len(failed), "retried summaries")
        assert len(upstream.summary_requests) == calls + len(failed)
        proxy.chat(next_turn(messages))
        assert summaries_in(upstream.chat_requests[-1].json())


def test_concurrency_bound(launch: Any, upstream: FakeUpstream, tmp_path: Path) -> None:
    upstream.summary_gate.clear()
    with launch(policy_text(tmp_path / "s.db", chunk_turns=2, concurrency=1)) as proxy:
        assert proxy.chat(conversation()).status_code == 200
        wait_for(lambda: upstream.summary_active == 1, "one call held")
        # All spans were scheduled in one pass, before the first call could reach the fake.
        assert proxy.summarizer.stats["scheduled"] >= 3
        assert len(upstream.summary_requests) == 1  # the others wait for the slot
        upstream.summary_gate.set()
        scheduled = proxy.summarizer.stats["scheduled"]
        wait_for(lambda: proxy.summarizer.stats["made"] == scheduled, "every summary made")
        assert upstream.summary_peak == 1 and len(upstream.summary_requests) == scheduled


def test_daily_cap_and_stream(launch: Any, upstream: FakeUpstream, tmp_path: Path) -> None:
    with launch(policy_text(tmp_path / "s.db", daily_token_cap=1)) as proxy:
        answer = proxy.chat(conversation(), stream=True)
        assert answer.status_code == 200 and "data: [DONE]" in answer.text
        wait_for(lambda: proxy.summarizer.stats["capped"] >= 1, "the cap to refuse")
        assert upstream.summary_requests == [] and proxy.rows("summary") == []


def test_off_by_default(
    launch: Any, upstream: FakeUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with launch("models: {gpt-4o: {context_window: 2000}}\n") as proxy:
        answer = proxy.chat(conversation())
        assert answer.status_code == 200 and int(answer.headers["x-context-trimmed"]) > 0
        assert sum(proxy.summarizer.stats.values()) == 0
    assert upstream.summary_requests == []
    assert not (tmp_path / "summaries.sqlite3").exists()  # no store opened, no file made
