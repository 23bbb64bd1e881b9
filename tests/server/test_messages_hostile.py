"""Anthropic's Messages routes against hostile bodies and unnamed upstreams: a clear 4xx in
Anthropic's error shape, never a 500; every body forwarded one the API takes; no Messages
request sent anywhere no one named.

Each named case here answered 500 (or forwarded to api.anthropic.com) before the checks it
names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import fake_messages
from tests.conftest import RunningProxy
from tests.fake_upstream import FakeUpstream

ROUTES = ("/v1/messages", "/v1/messages/count_tokens", "/v1/context/plan")
MODEL = "claude-sonnet-4-6"


@pytest.fixture
def anthropic_proxy(
    start_proxy: Any, policies_dir: Path, fake_upstream_server: tuple[FakeUpstream, str]
) -> RunningProxy:
    _, base = fake_upstream_server
    (policies_dir / "default.yaml").write_text(
        f"team: open\nupstream: {{anthropic: {{base_url: '{base}'}}}}\n"
        f"models:\n  {MODEL}: {{context_window: 2000}}\n"
    )
    return start_proxy()  # type: ignore[no-any-return]


def post(proxy: RunningProxy, path: str, body: Any) -> httpx.Response:
    headers = {"x-api-key": "sk-ant-client", "anthropic-version": "2023-06-01"}
    return httpx.post(proxy.url + path, content=orjson.dumps(body), headers=headers, timeout=60)


def body(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}],
            **fields}  # fmt: skip


def use(i: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": i, "name": "f", "input": {}}


def result(i: str, text: str = "ok") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": i, "content": text}


HOSTILE = {
    "tools a number": body(tools=3),
    "tools true": body(tools=True),
    "tools an object": body(tools={"name": "f"}),
    "tools of numbers": body(tools=[1, 2]),
    "content a number": body(messages=[{"role": "user", "content": 5}]),
    "content true": body(messages=[{"role": "user", "content": True}]),
    "content an object": body(messages=[{"role": "user", "content": {"text": "hi"}}]),
    "content of numbers": body(messages=[{"role": "user", "content": [1, 2]}]),
    "system a number": body(system=7),
    "system of numbers": body(system=[1]),
    "role a list": body(messages=[{"role": ["user"], "content": "hi"}]),
}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_body_of_the_wrong_types_gets_a_400_in_anthropics_shape(
    anthropic_proxy: RunningProxy, upstream: FakeUpstream, route: str, case: str
) -> None:
    r = post(anthropic_proxy, route, HOSTILE[case])
    answer = r.json()
    if route != "/v1/context/plan":
        assert r.status_code == 400, (r.status_code, r.text[:300])
        assert answer["type"] == "error" and answer["error"]["type"] == "invalid_request_error"
        assert answer["error"]["message"]
    elif "system" in HOSTILE[case]:  # read as a Messages body (a chat one has no `system`)
        assert r.status_code == 400, (r.status_code, r.text[:300])
        assert answer["error"]["type"] == "invalid_request_error"
    else:  # as a chat body, whose content the planner keeps as it came
        assert r.status_code in (200, 400), (r.status_code, r.text[:300])
    assert not upstream.messages_requests


def long_loop(after_last_call: list[dict[str, Any]], ids: list[str]) -> dict[str, Any]:
    """A loop over the 2,000-token window whose assistant messages end with more blocks
    after their calls, one with two calls."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start " * 50}]
    for k in range(12):
        calls = [use(f"{i}{k}") for i in ids]
        messages.append({"role": "assistant", "content": [*calls, *after_last_call]})
        messages.append({"role": "user", "content": [result(f"{i}{k}", "data " * 60) for i in ids]})
    return body(messages=messages)


@pytest.mark.parametrize("ids", [["a"], ["a", "b"]])
@pytest.mark.parametrize(
    "after", [[{"type": "text", "text": "and then"}], [{"type": "text", "text": "x"}] * 2]
)
def test_blocks_after_the_last_call_plan_into_a_valid_body(
    anthropic_proxy: RunningProxy, upstream: FakeUpstream, ids: list[str], after: list[Any]
) -> None:
    r = post(anthropic_proxy, "/v1/messages", long_loop(after, ids))
    assert r.status_code == 200, r.text[:500]
    [sent] = [x.json() for x in upstream.messages_requests]
    assert fake_messages.problem(sent) is None
    uses = [b["id"] for m in sent["messages"] if isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_use"]  # fmt: skip
    assert len(uses) == len(set(uses))  # no call twice, none lost beside its result
    results = {b["tool_use_id"] for m in sent["messages"] if isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result"}  # fmt: skip
    assert results == set(uses)


def test_no_anthropic_upstream_named_refuses_before_reading_the_body(
    start_proxy: Any, policies_dir: Path, upstream: FakeUpstream,
    fake_upstream_server: tuple[FakeUpstream, str],
) -> None:  # fmt: skip
    (policies_dir / "default.yaml").write_text("team: open\n")
    proxy = start_proxy()
    r = post(proxy, "/v1/messages", body())
    assert r.status_code == 400
    error = r.json()["error"]
    assert "--anthropic-upstream" in error["message"] and "upstream.anthropic" in error["message"]
    assert not upstream.requests  # nothing sent anywhere
    # Counting needs no upstream; with --anthropic-upstream the request goes there.
    assert post(proxy, "/v1/messages/count_tokens", body()).status_code == 200
    named = start_proxy(anthropic_upstream=fake_upstream_server[1])
    assert post(named, "/v1/messages", body()).status_code == 200
    assert len(upstream.messages_requests) == 1


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=8))
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
block = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=20)),
    st.builds(use, st.sampled_from(["a", "b", "c"])),
    st.builds(
        lambda i, v: {**result(i), "content": v},
        st.sampled_from(["a", "b", "z"]),
        st.one_of(st.text(max_size=10), json_value),
    ),
    st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "s"}, st.text(max_size=8)),
    json_value,
)
message = st.fixed_dictionaries(
    {
        "role": st.one_of(st.sampled_from(["user", "assistant"]), json_value),
        "content": st.one_of(st.text(max_size=30), st.lists(block, max_size=4), json_value),
    }
)
bodies = st.fixed_dictionaries(
    {"model": st.just(MODEL), "max_tokens": st.one_of(st.integers(1, 500), json_value),
     "messages": st.lists(message, min_size=1, max_size=6)},
    optional={"tools": st.one_of(json_value, st.lists(st.fixed_dictionaries(
                  {"name": st.text(min_size=1, max_size=5), "input_schema": json_value}), max_size=2)),
              "system": st.one_of(st.text(max_size=20), json_value)},
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(bodies)
def test_any_messages_body_gets_an_answer_never_a_500(
    anthropic_proxy: RunningProxy, upstream: FakeUpstream, sent: dict[str, Any]
) -> None:
    for route in ROUTES:
        r = post(anthropic_proxy, route, sent)
        assert r.status_code < 500, (route, r.status_code, r.text[:300])
