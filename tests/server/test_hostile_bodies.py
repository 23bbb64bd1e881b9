"""Hostile bodies on every planned route: a clear OpenAI-shaped 400, never a 500, never a
forward over the window, and no body that costs far more than its size.

Each case here answered 500 (or forwarded, or took gigabytes) before the checks it names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.server.pipeline.body_limits import MAX_PARTS, check_density
from tests.conftest import RunningProxy
from tests.fake_upstream import FakeUpstream

ROUTES = ("/v1/chat/completions", "/v1/responses", "/v1/context/plan")


def post(proxy: RunningProxy, path: str, body: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else _deep_json(body)
    return httpx.post(proxy.url + path, content=content, timeout=60)


def refused(r: httpx.Response, code: str | None = None) -> dict[str, Any]:
    assert r.status_code == 400, (r.status_code, r.text[:300])
    error: dict[str, Any] = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    if code is not None:
        assert error["code"] == code
    return error


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


def responses_body(**fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", **fields}


# --- types the Responses reader did not expect (TypeError in items/read.py) -------------------


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/context/plan"])
@pytest.mark.parametrize(
    "item",
    [
        {"type": "message", "role": ["user"], "content": "hi"},
        {"type": "message", "role": {"r": 1}, "content": "hi"},
        {"role": "user", "content": [{"type": ["input_text"], "text": "hi"}]},
        {"role": "user", "content": [{"type": {"t": 1}, "text": "hi"}]},
        {"role": "user", "content": [{"type": ["input_text"], "text": "a"}, {"type": "x"}]},
    ],
)
def test_a_role_or_part_type_of_the_wrong_type_is_not_a_500(
    proxy: RunningProxy, upstream: FakeUpstream, path: str, item: dict[str, Any]
) -> None:
    r = post(proxy, path, responses_body(input=[item]))
    assert r.status_code < 500, r.text[:300]


# --- depth -----------------------------------------------------------------------------------


def long_chat(extra: dict[str, Any]) -> dict[str, Any]:
    """A chat over its budget (so that the body is rewritten), one message carrying `extra`."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "word " * 3000} for _ in range(60)
    ]
    messages.append({"role": "user", "content": "now", **extra})
    return {"model": "gpt-4o-mini", "messages": messages}


def test_a_chat_nested_past_what_can_be_written_back_is_refused(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    (policies_dir / "default.yaml").write_text("models:\n  gpt-4o-mini: {context_window: 8000}\n")
    proxy = start_proxy()
    body = long_chat({"metadata_extra": nested(300)})
    error = refused(post(proxy, "/v1/chat/completions", body), "nested_too_deep")
    assert "254" in error["message"]
    assert not upstream.requests


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/context/plan"])
@pytest.mark.parametrize("where", ["item", "instructions", "part"])
def test_responses_nested_1000_deep_are_not_a_500(
    proxy: RunningProxy, upstream: FakeUpstream, path: str, where: str
) -> None:
    """Within the budget the request goes as it came (its bytes); what must be written
    back (the plan's answer) is refused with the reason."""
    deep = b'{"a":' * 1000 + b'"x"' + b"}" * 1000  # past what orjson writes (254 levels)
    if where == "item":
        raw = b'{"model":"gpt-4o","input":[{"type":"web_search_call","action":' + deep + b"}]}"
    elif where == "instructions":
        raw = b'{"model":"gpt-4o","input":"hi","instructions":' + deep + b"}"
    else:
        raw = b'{"model":"gpt-4o","input":[{"role":"user","content":[{"type":"input_file","x":'
        raw += deep + b"}]}]}"
    r = post(proxy, path, raw)
    if path == "/v1/responses":
        assert r.status_code == 200, r.text[:300]
        assert upstream.responses_requests[-1].body == raw
    else:
        refused(r, "nested_too_deep")


def _deep_json(value: Any) -> bytes:
    """JSON past orjson's writing depth (254 levels, not past Python's recursion limit),
    written by hand."""
    if isinstance(value, dict):
        return (
            b"{"
            + b",".join(orjson.dumps(k) + b":" + _deep_json(v) for k, v in value.items())
            + b"}"
        )
    if isinstance(value, list):
        return b"[" + b",".join(_deep_json(v) for v in value) + b"]"
    return orjson.dumps(value)


# --- counts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ROUTES)
def test_a_body_of_countless_empty_parts_is_refused_before_it_is_converted(
    proxy: RunningProxy, upstream: FakeUpstream, path: str
) -> None:
    """Millions of `{}` parts (3 bytes each) took 4 GB before; past MAX_PARTS parts a
    request is refused with a count, within its size bound."""
    parts = b",".join([b"{}"] * (MAX_PARTS + 1))
    if path == "/v1/chat/completions":
        raw = b'{"model":"gpt-4o","messages":[{"role":"user","content":[' + parts + b"]}]}"
    else:
        raw = b'{"model":"gpt-4o","input":[{"role":"user","content":[' + parts + b"]}]}"
    error = refused(post(proxy, path, raw))
    assert error["code"] in ("too_many_parts", "too_many_objects")
    assert not upstream.requests and not upstream.responses_requests


def test_density_counts_containers_outside_strings() -> None:
    """Braces inside strings (code, JSON tool output) are text, not objects: never refused
    for them; a body made of empty objects is."""
    code = "def f(x): return {'a': [1, {2: [3]}]}  # \\\" {[" * 20_000
    check_density(orjson.dumps({"model": "m", "messages": [{"role": "user", "content": code}]}))
    with pytest.raises(Exception, match="objects"):
        check_density(b'{"model":"m","input":[' + b",".join([b"{}"] * 200_000) + b"]}")


# --- over the window -------------------------------------------------------------------------


def test_truncate_mode_refuses_what_cannot_be_cut_below_the_window(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    """300 parallel tool calls (calls cannot be cut) over a 4,000-token window: refused
    with context_length_exceeded, never forwarded at 6,600 tokens."""
    (policies_dir / "default.yaml").write_text(
        "budget: {on_required_overflow: truncate, reserve_output: false}\n"
        "models:\n  gpt-4o: {context_window: 4000}\n"
    )
    proxy = start_proxy()
    calls = [
        {"id": f"c{k}", "type": "function", "function": {"name": f"lookup_{k}", "arguments": "{}"}}
        for k in range(300)
    ]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "look everything up"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": f"c{k}", "content": "ok"} for k in range(300)),
    ]
    r = post(proxy, "/v1/chat/completions", {"model": "gpt-4o", "messages": messages})
    assert refused(r, "context_length_exceeded")
    assert "window" in r.json()["error"]["message"]
    assert not upstream.requests


# --- what goes upstream, and what a cut stream records ---------------------------------------


def test_x_context_on_any_responses_item_is_never_forwarded(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    """x_context on a function_call_output (or a call) was forwarded as it came."""
    items = [
        {"role": "user", "content": "look it up"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}",
         "x_context": {"priority": "low"}},
        {"type": "function_call_output", "call_id": "c1", "output": "found",
         "x_context": {"priority": "required", "section": "system_prompt"}},
    ]  # fmt: skip
    r = post(proxy, "/v1/responses", responses_body(input=items))
    assert r.status_code == 200
    sent = upstream.responses_requests[-1].json()["input"]
    assert sent == [{k: v for k, v in i.items() if k != "x_context"} for i in items]


def test_a_responses_stream_cut_short_ends_with_an_error_and_records_it(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    """An upstream stream that ends cleanly before response.completed: the client got no
    error event and the row said 200 with no error."""
    from tests.server.test_proxy_e2e import usage_rows

    upstream.mode = "cut_short"
    body = responses_body(input="Say hello to everyone here.", stream=True)
    with httpx.stream("POST", proxy.url + "/v1/responses", json=body, timeout=30) as r:
        text = r.read().decode()
    last = [line for line in text.splitlines() if line.startswith("data: ")][-1]
    assert orjson.loads(last[6:])["type"] == "error"
    (row,) = usage_rows(proxy)
    assert row["error"] == "upstream_stream_incomplete" and row["status"] == 502


def test_parts_are_bounded_by_the_body_size(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    """28,000 tiny text parts in 980 KB took 20 MB (21x the body) to read and plan: a body
    holds at most one part per BYTES_PER_PART bytes (past the first FREE_CONTAINERS)."""
    from proxy.server.pipeline.body_limits import BYTES_PER_PART, FREE_CONTAINERS

    part = b'{"type":"input_text","text":"a b"}'
    raw = b'{"model":"gpt-4o","input":[{"role":"user","content":[' + b",".join([part] * 28_000)
    raw += b"]}]}"
    assert FREE_CONTAINERS + len(raw) // BYTES_PER_PART < 28_000
    error = refused(post(proxy, "/v1/responses", raw), "too_many_parts")
    assert "28,000 content parts" in error["message"]
    fewer = b'{"model":"gpt-4o","input":[{"role":"user","content":[' + b",".join([part] * 3000)
    assert post(proxy, "/v1/responses", fewer + b"]}]}").status_code == 200


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/context/plan"])
def test_an_old_tool_result_of_deep_json_is_planned_not_a_failure(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, path: str
) -> None:
    """An agent loop over budget whose old tool result holds JSON 400 deep (past what
    orjson writes, within what it reads): compaction leaves that result as it came and the
    plan goes on; before, the plan raised (a 500 from the plan route, and the chat request
    forwarded untrimmed on every later turn)."""
    (policies_dir / "default.yaml").write_text("models:\n  gpt-4o: {context_window: 3000}\n")
    proxy = start_proxy()
    deep = "[" * 400 + "1" + "]" * 400
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the build."}]
    for k in range(12):
        call = {"id": f"c{k}", "type": "function",
                "function": {"name": "run", "arguments": "{}"}}  # fmt: skip
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        output = deep if k == 0 else f"log {k}: " + "word " * 300
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": output})
    r = httpx.post(proxy.url + path, json={"model": "gpt-4o", "messages": messages}, timeout=60)
    assert r.status_code == 200, r.text[:300]
    sent = upstream.last.json() if path != "/v1/context/plan" else r.json()["request"]
    assert len(orjson.dumps(sent)) < len(orjson.dumps(messages))  # trimmed to fit


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/context/plan"])
@pytest.mark.parametrize("cache", ["prompt_cache_key", "cache_control", "cache.chats"])
def test_an_old_message_nested_past_the_writers_depth_is_planned_in_cache_mode(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, path: str, cache: str
) -> None:
    """Cache mode keeps the plans of conversations by a digest of their messages' JSON: an
    old message nested 300 deep (past what orjson writes) made that digest raise, and the
    request went untrimmed (the plan route: a 500). It is planned like any other: an old
    stretch of turns, it is left out."""
    policy = "models:\n  gpt-4o-mini: {context_window: 8000}\n"
    if cache == "cache.chats":
        policy += "cache: {chats: true}\n"
    (policies_dir / "default.yaml").write_text(policy)
    proxy = start_proxy()
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    messages.append({"role": "user", "content": "question 0"})
    for k in range(90):
        messages.append({"role": "assistant", "content": f"answer {k} " + "word " * 300})
        messages.append({"role": "user", "content": f"question {k + 1}"})
    old = messages[4]  # an old reply, one of its parts nested 300 deep
    old["content"] = [{"type": "text", "text": old["content"], "metadata_extra": nested(300)}]
    body: dict[str, Any] = {"model": "gpt-4o-mini", "messages": messages}
    if cache == "prompt_cache_key":
        body["prompt_cache_key"] = "team-a"
    elif cache == "cache_control":
        messages[0]["content"] = [
            {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
        ]
    raw = _deep_json(body)
    r = post(proxy, path, raw)
    assert r.status_code == 200, r.text[:300]
    sent = upstream.last.json() if path != "/v1/context/plan" else r.json()["request"]
    assert len(orjson.dumps(sent)) < len(raw) // 2  # trimmed to fit
    assert "metadata_extra" not in orjson.dumps(sent).decode()
