"""A bug in planning never fails a chat request: it is forwarded as it came, and logged
without its content; the dry-run plan endpoint answers an OpenAI-shaped error."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import orjson
import pytest

from proxy.policy.model import Policy
from proxy.server.pipeline import plan_step
from proxy.tokens.counter import TokenCounter
from tests.conftest import RunningProxy
from tests.fake_upstream import FakeUpstream

SECRET = "the launch code is 0000"
BODY = orjson.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": SECRET}]})


@pytest.fixture
def broken_planner(monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(body: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        raise ValueError(f"cannot plan {body['messages'][0]['content']}")

    monkeypatch.setattr(plan_step, "plan_request", explode)


@pytest.mark.usefixtures("broken_planner")
def test_chat_fails_open(
    proxy: RunningProxy, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        response = httpx.post(
            proxy.url + "/v1/chat/completions",
            content=BODY,
            headers={"content-type": "application/json", "authorization": "Bearer sk-x"},
        )
    assert response.status_code == 200
    assert upstream.last.body == BODY  # forwarded as it came
    assert response.headers["x-context-trimmed"] == "0"
    assert response.headers["x-context-budget"] == "none"
    failures = [r for r in caplog.records if r.name == "context_proxy.plan"]
    assert len(failures) == 1 and "ValueError" in failures[0].getMessage()
    assert "explode" in failures[0].getMessage()  # where it failed
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert SECRET not in logged and "sk-x" not in logged
    metrics = httpx.get(proxy.url + "/metrics").text
    assert 'context_proxy_plan_failures_total{team="default"} 1.0' in metrics


@pytest.mark.usefixtures("broken_planner")
def test_plan_endpoint_says_it_failed(proxy: RunningProxy) -> None:
    response = httpx.post(proxy.url + "/v1/context/plan", content=BODY)
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "plan_failed" and error["type"] == "api_error"
    assert SECRET not in response.text


def test_loaded_never_loads() -> None:
    counter, policy = TokenCounter(), Policy()
    assert counter.loaded("gpt-4o", policy) is None
    tokenizer = counter.for_model("gpt-4o", policy)
    assert counter.loaded("gpt-4o", policy) is tokenizer
    assert counter.loaded("gpt-4", policy) is None  # another encoding: not loaded yet


def chat(n: int, tag: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"{tag} message {i} " + "word " * 80} for i in range(n)]


def test_a_next_turn_is_planned_inline_a_first_look_in_a_thread() -> None:
    tokenizer = TokenCounter().chat_tokenizer("gpt-4o", Policy())
    history = chat(600, "a")
    body = {"model": "gpt-4o", "messages": history}
    size = len(orjson.dumps(body))
    assert size > plan_step.PLAN_IN_THREAD_BYTES
    assert not tokenizer.seen(history)
    assert plan_step.plan_in_thread(body, tokenizer, size)  # never seen: ~40 ms of counting
    tokenizer.count_messages(history)
    nxt = {"model": "gpt-4o", "messages": [*history, *chat(2, "new")]}
    assert tokenizer.seen(nxt["messages"])
    assert not plan_step.plan_in_thread(nxt, tokenizer, size)  # the next turn: inline
    assert plan_step.plan_in_thread(nxt, tokenizer, plan_step.PLAN_INLINE_MAX_BYTES + 1)
    assert not plan_step.plan_in_thread(nxt, tokenizer, 1000)  # small: always inline
    # A new conversation that shares only its start with a known one is not "seen".
    mixed = history[:10] + chat(590, "b")
    assert not tokenizer.seen(mixed)


def test_a_body_is_not_seen_because_its_sampled_places_were() -> None:
    """Every place a sample of 16 would look at holds a message counted before, the rest
    is new: a first look (~40 ms of counting), planned off the event loop."""
    tokenizer = TokenCounter().chat_tokenizer("gpt-4o", Policy())
    known = chat(40, "k")
    tokenizer.count_messages(known)
    messages = chat(600, "fresh")
    step = (len(messages) - 2) // 16
    for n, at in enumerate(range(0, len(messages) - 2, step)):
        messages[at] = known[n % len(known)]
    body = {"model": "gpt-4o", "messages": messages}
    assert not tokenizer.seen(messages)
    assert plan_step.plan_in_thread(body, tokenizer, len(orjson.dumps(body)))
