"""The contract's guarantees for chat completions, held for Responses API bodies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.conftest import RunningProxy
from tests.fake_upstream import FakeUpstream
from tests.server.test_proxy_e2e import usage_rows
from tests.server.test_responses_e2e import SMALL_WINDOW, conversation, filler


def in_order(sent: list[Any], items: list[Any]) -> bool:
    """Whether the items of `sent` that came in `items` are in their original order."""
    where = {orjson.dumps(item): k for k, item in enumerate(items)}
    places = [where[key] for key in map(orjson.dumps, sent) if key in where]
    return places == sorted(places)


def test_tags_are_removed_before_forwarding(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    image = {"type": "input_image", "image_url": "https://example.com/a.png"}
    body = {
        "model": "gpt-4o",
        "input": [
            {"role": "user", "content": "remember", "x_context": {"section": "memory"}},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": 'a <context section="memory">m</context> b'},
                    image,
                ],
            },
        ],
    }
    response = httpx.post(proxy.url + "/v1/responses", json=body)
    assert response.status_code == 200
    sent = upstream.last.json()["input"]
    assert sent[0] == {"role": "user", "content": "remember"}  # x_context removed
    # A user's inline tag is read (and removed) only where the policy says so: by
    # default it is the user's text, forwarded as written.
    assert sent[1] == body["input"][1]
    assert sent[1]["content"][1] == image
    body["instructions"] = 'Rules. <context section="memory">m</context> End.'
    assert httpx.post(proxy.url + "/v1/responses", json=body).status_code == 200
    assert upstream.last.json()["instructions"] == "Rules. m End."


def test_opaque_items_are_never_dropped_and_order_is_kept(
    start_proxy: Any, policies_dir: Path, upstream: FakeUpstream
) -> None:
    (policies_dir / "default.yaml").write_text(SMALL_WINDOW)
    proxy = start_proxy()
    items = conversation(40)
    for k in (5, 31, 60):
        items.insert(k, {"type": "web_search_call", "id": f"ws_{k}", "status": "completed"})
    body = {"model": "gpt-4o", "input": items}
    first = httpx.post(proxy.url + "/v1/responses", json=body)
    assert first.status_code == 200 and int(first.headers["x-context-trimmed"]) > 0
    sent = upstream.last.json()["input"]
    assert [i for i in sent if i.get("type") == "web_search_call"] == [
        i for i in items if i.get("type") == "web_search_call"
    ]
    assert in_order(sent, items) and sent[-1] == items[-1]
    # the same request and policy give the same forwarded body
    again = httpx.post(proxy.url + "/v1/responses", json=body)
    assert again.status_code == 200
    assert upstream.requests[-1].body == upstream.requests[-2].body


def test_required_overflow_is_an_openai_shaped_400(
    start_proxy: Any, policies_dir: Path, upstream: FakeUpstream
) -> None:
    (policies_dir / "default.yaml").write_text(SMALL_WINDOW)
    proxy = start_proxy()
    body = {"model": "gpt-4o", "input": filler(1, 3000)}
    response = httpx.post(proxy.url + "/v1/responses", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["type"] == "invalid_request_error"
    assert response.headers["x-context-budget"]
    assert upstream.requests == []
    row = usage_rows(proxy)[-1]
    assert row["api"] == "responses" and row["status"] == 400 and row["prompt_tokens"] == 0


def test_other_responses_routes_pass_through(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    got = httpx.get(proxy.url + "/v1/responses/resp_1?include=x")
    assert got.status_code == 200
    assert got.json()["path"] == "/v1/responses/resp_1" and got.json()["query"] == "include=x"
    cancelled = httpx.post(proxy.url + "/v1/responses/resp_1/cancel")
    assert cancelled.json()["path"] == "/v1/responses/resp_1/cancel"


def test_a_failed_write_back_forwards_the_request_as_it_came(
    start_proxy: Any, policies_dir: Path, upstream: FakeUpstream, monkeypatch: Any
) -> None:
    from proxy.server.dialects import responses as responses_api

    def broken(*args: Any) -> Any:
        raise RuntimeError("secret request text")

    monkeypatch.setattr(responses_api, "to_responses", broken)
    (policies_dir / "default.yaml").write_text(SMALL_WINDOW)
    proxy = start_proxy()
    raw = orjson.dumps({"model": "gpt-4o", "input": conversation(40)})
    response = httpx.post(proxy.url + "/v1/responses", content=raw)
    assert response.status_code == 200
    assert upstream.last.body == raw
    assert response.headers["x-context-trimmed"] == "0"
    assert usage_rows(proxy)[-1]["api"] == "responses"


def test_a_body_over_a_megabyte_is_read_and_written_back_off_the_loop(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    items = conversation(1500)
    raw = orjson.dumps({"model": "gpt-4o", "input": items})
    assert len(raw) > 1024 * 1024
    response = httpx.post(proxy.url + "/v1/responses", content=raw, timeout=60)
    assert response.status_code == 200
    assert (
        int(response.headers["x-context-tokens-after"])
        <= int(response.headers["x-context-budget"])
        < int(response.headers["x-context-tokens-before"])
    )
    sent = upstream.last.json()["input"]
    assert sent[-1] == items[-1] and in_order(sent, items)


def test_fields_of_the_wrong_shape_never_give_a_500(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    """Whatever a client puts in the optional fields, forwarding and the plan endpoint
    answer as for chat (an OpenAI-shaped 4xx or the upstream's answer), never a 500."""
    odd: list[Any] = [1, "x", {"a": 1}, [1, "x", None], True, 2.5]
    for field in ("tools", "tool_choice", "instructions", "max_output_tokens", "reasoning"):
        for value in odd:
            body = {"model": "gpt-4o", "input": "hi", field: value}
            for route in ("/v1/responses", "/v1/responses/compact", "/v1/context/plan"):
                response = httpx.post(proxy.url + route, json=body)
                assert response.status_code < 500, (field, value, route, response.text)
                if response.status_code >= 400:
                    assert "error" in response.json()
