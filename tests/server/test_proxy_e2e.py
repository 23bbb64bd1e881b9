"""End to end: the official openai client and httpx through the proxy to the fake upstream."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.policy.model import hash_key
from tests.conftest import RunningProxy, free_port
from tests.fake_upstream import FakeUpstream

CONTEXT_HEADERS = (
    "x-request-id",
    "x-context-policy",
    "x-context-window",
    "x-context-budget",
    "x-context-tokens-before",
    "x-context-tokens-after",
    "x-context-trimmed",
    "x-context-level",
)
SMALL = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Say hello."}]}


def usage_rows(proxy: RunningProxy, at_least: int = 1) -> list[dict[str, Any]]:
    """The usage log's rows, waiting briefly: rows are written off the request path (a
    row the writer is still appending, read before its line ends, is read next time)."""
    path = proxy.usage_path
    deadline = time.monotonic() + 5
    while True:
        data = path.read_bytes() if path.exists() else b""
        rows = [orjson.loads(line) for line in data[: data.rfind(b"\n") + 1].splitlines()]
        if len(rows) >= at_least or time.monotonic() > deadline:
            return rows
        time.sleep(0.01)


def client(proxy: RunningProxy, key: str = "sk-client") -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0, timeout=20)


def test_healthz(proxy: RunningProxy) -> None:
    response = httpx.get(proxy.url + "/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_openai_client_plain(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    raw = client(proxy).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Say hello."}]
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == upstream.reply_text
    for name in CONTEXT_HEADERS:
        assert raw.headers.get(name), name
    assert raw.headers["x-context-trimmed"] == "0"
    assert raw.headers["x-context-level"] == "normal"
    assert (
        int(raw.headers["x-context-tokens-before"])
        == int(raw.headers["x-context-tokens-after"])
        > 0
    )
    assert raw.headers["x-context-window"] == "128000"
    assert upstream.last.headers["authorization"] == "Bearer sk-client"
    assert upstream.last.json()["messages"] == [{"role": "user", "content": "Say hello."}]


def test_untouched_request_forwarded_byte_for_byte(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    body = b'{"model": "gpt-4o",   "messages": [{"role": "user", "content": "caf\\u00e9"}], "temperature": 0.5}'
    response = httpx.post(
        proxy.url + "/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 200
    assert upstream.last.body == body


def test_chat_route_without_v1(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    response = httpx.post(proxy.url + "/chat/completions", json=SMALL)
    assert response.status_code == 200
    assert upstream.last.path == "/v1/chat/completions"


def test_openai_client_stream_without_usage(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    stream = client(proxy).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == upstream.reply_text
    # The proxy asked for usage on its own behalf, but the client never sees it.
    assert upstream.last.json()["stream_options"] == {"include_usage": True}
    assert all(c.usage is None for c in chunks)
    assert all(c.choices for c in chunks)
    row = usage_rows(proxy)[-1]
    assert row["usage_source"] == "upstream" and row["stream"] is True
    assert row["completion_tokens"] == len(upstream.reply_text.split(" "))


def test_openai_client_stream_with_usage(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    stream = client(proxy).chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 11


def test_stream_is_relayed_as_it_arrives(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    upstream.reply_text = " ".join(f"w{i}" for i in range(30))
    seen: list[bytes] = []
    with httpx.stream(
        "POST", proxy.url + "/v1/chat/completions", json=dict(SMALL, stream=True)
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-context-trimmed"] == "0"
        for chunk in response.iter_raw():
            seen.append(chunk)
    # 30 words paced by the fake upstream arrive as many pieces, not one buffered answer.
    assert len(seen) > 5
    assert b"".join(seen).endswith(b"data: [DONE]\n\n")


def test_stream_break_gives_error_event(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    upstream.mode = "break"
    with pytest.raises(openai.APIError):
        list(
            client(proxy).chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        )
    row = usage_rows(proxy)[-1]
    assert row["error"] == "upstream_stream_broken"
    assert httpx.get(proxy.url + "/healthz").status_code == 200


def test_passthrough_models(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    models = client(proxy).models.list()
    assert [m.id for m in models.data] == ["gpt-4o"]
    response = httpx.get(
        proxy.url + "/v1/models",
        headers={"connection": "keep-alive, x-secret", "x-secret": "1", "keep-alive": "5"},
    )
    assert response.headers["x-upstream"] == "yes"
    assert "x-secret" not in upstream.last.headers and "keep-alive" not in upstream.last.headers


def test_passthrough_body_query_and_streamed_answer(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    payload = b"x" * 300_000  # an upload: streamed through as it comes
    response = httpx.post(
        proxy.url + "/v1/files?api-version=2&x=1",
        content=payload,
        headers={"authorization": "Bearer sk-user"},
    )
    assert response.json() == {
        "method": "POST",
        "path": "/v1/files",
        "query": "api-version=2&x=1",
        "size": 300_000,
        "authorization": "Bearer sk-user",
    }
    assert upstream.last.body == payload
    streamed = httpx.get(proxy.url + "/v1/stream-out")
    assert streamed.text == "part0;part1;part2;part3;part4;"
    for method in ("PUT", "DELETE", "PATCH"):
        assert httpx.request(method, proxy.url + "/v1/files/abc").json()["method"] == method


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b"[]", None),
        (b'{"messages": [{"role": "user", "content": "x"}]}', "model"),
        (b'{"model": "gpt-4o"}', "messages"),
        (b'{"model": "gpt-4o", "messages": "hello"}', "messages"),
        (b'{"model": "gpt-4o", "messages": [3]}', "messages[0]"),
        (b'{"model": 5, "messages": []}', "model"),
        (
            b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}], "max_tokens": "9"}',
            "max_tokens",
        ),
        (b"\xff\xfe garbage", None),
        (b'{"model": "gpt-4o", "messages": [{"role": "user", "content": NaN}]}', None),
    ],
)
def test_bad_bodies_get_400(
    proxy: RunningProxy, upstream: FakeUpstream, body: bytes, param: str | None
) -> None:
    response = httpx.post(proxy.url + "/v1/chat/completions", content=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert set(error) == {"message", "type", "param", "code"}
    assert upstream.requests == []
    assert response.headers["x-request-id"]
    assert usage_rows(proxy)[-1]["status"] == 400
    assert usage_rows(proxy)[-1]["error"] == "invalid_request_error"


def test_body_over_limit_gets_413(start_proxy: Any, upstream: FakeUpstream) -> None:
    proxy = start_proxy(max_body_mb=0.01)
    big = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 20_000}]}
    response = httpx.post(proxy.url + "/v1/chat/completions", json=big)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    chunked = httpx.post(
        proxy.url + "/v1/chat/completions",
        content=iter([b'{"model": "gpt-4o", "messages": [', b" " * 20_000]),
    )
    assert chunked.status_code == 413
    assert upstream.requests == []


def test_upstream_error_passed_through(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    upstream.mode, upstream.status = "error", 429
    response = httpx.post(proxy.url + "/v1/chat/completions", json=SMALL)
    assert response.status_code == 429
    assert response.content == upstream.error_body
    assert response.headers["retry-after"] == "7"
    assert response.headers["x-context-level"] == "normal"
    with pytest.raises(openai.RateLimitError):
        client(proxy).chat.completions.create(**SMALL)  # type: ignore[call-overload]


def test_upstream_html_error_passed_through(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    upstream.mode = "html"
    response = httpx.post(proxy.url + "/v1/chat/completions", json=SMALL)
    assert response.status_code == 502
    assert b"Bad gateway" in response.content


def test_upstream_invalid_json_is_502(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    upstream.mode = "invalid_json"
    response = httpx.post(proxy.url + "/v1/chat/completions", json=SMALL)
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_invalid_response"


def test_upstream_unreachable_is_502(start_proxy: Any) -> None:
    proxy = start_proxy(upstream=f"http://127.0.0.1:{free_port()}/v1")
    response = httpx.post(proxy.url + "/v1/chat/completions", json=SMALL)
    assert response.status_code == 502
    assert response.json()["error"]["type"] == "upstream_error"
    assert httpx.get(proxy.url + "/v1/models").status_code == 502
    assert usage_rows(proxy)[-1]["error"] == "upstream_unreachable"


def test_upstream_timeout_is_504(
    start_proxy: Any, policies_dir: Path, upstream: FakeUpstream
) -> None:
    (policies_dir / "default.yaml").write_text("upstream: {timeout_s: 0.3}\n")
    proxy = start_proxy()
    upstream.mode = "hang"
    response = httpx.post(proxy.url + "/v1/chat/completions", json=SMALL, timeout=10)
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "upstream_timeout"


def test_keys_mode(
    start_proxy: Any, policies_dir: Path, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RESEARCH_KEY", "sk-upstream-secret")
    (policies_dir / "research.yaml").write_text(
        f'team: research\nkeys: ["{hash_key("cp-research-1")}"]\n'
        "upstream: {api_key_env: RESEARCH_KEY}\n"
    )
    proxy = start_proxy()
    missing = httpx.post(proxy.url + "/v1/chat/completions", json=SMALL)
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "invalid_api_key"
    wrong = httpx.post(
        proxy.url + "/v1/chat/completions",
        json=SMALL,
        headers={"authorization": "Bearer cp-research-2"},
    )
    assert wrong.status_code == 401
    assert "cp-research-2" not in wrong.text
    assert httpx.get(proxy.url + "/v1/models").status_code == 401
    assert upstream.requests == []
    raw = client(proxy, "cp-research-1").chat.completions.with_raw_response.create(**SMALL)  # type: ignore[call-overload]
    assert raw.headers["x-context-policy"] == "research"
    assert upstream.last.headers["authorization"] == "Bearer sk-upstream-secret"
    rows = usage_rows(proxy, at_least=3)
    assert rows[-1]["team"] == "research"
    log_text = proxy.usage_path.read_text()
    assert "cp-research" not in log_text and "sk-upstream-secret" not in log_text


def test_unknown_route_is_openai_shaped_404(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    response = httpx.get(proxy.url + "/nope")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    # GET on the chat route is not ours: it goes upstream like any other /v1 route.
    httpx.get(proxy.url + "/v1/chat/completions")
    assert upstream.last.method == "GET" and upstream.last.path == "/v1/chat/completions"


def test_metrics_count_requests(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    httpx.post(proxy.url + "/v1/chat/completions", json=SMALL)
    text = httpx.get(proxy.url + "/metrics").text
    assert 'team="default"' in text
    assert "context_proxy_requests_total" in text


def test_trimmed_answer_has_exact_length_and_headers(
    start_proxy: Any, upstream: FakeUpstream
) -> None:
    """A trimmed request's answer (built by responses.plain, request objects kept alive until
    it is sent) carries the upstream's body, its own content-length and the context headers."""
    proxy = start_proxy()
    history = [
        {"role": "user" if i % 2 else "assistant", "content": f"turn {i} " + "word " * 4000}
        for i in range(60)
    ]
    body = {"model": "gpt-4o", "messages": [*history, {"role": "user", "content": "And now?"}]}
    response = httpx.post(proxy.url + "/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert int(response.headers["x-context-trimmed"]) > 0
    assert response.headers["content-length"] == str(len(response.content))
    assert response.json()["choices"][0]["message"]["content"] == upstream.reply_text
    forwarded = upstream.last.json()["messages"]
    assert len(forwarded) < len(body["messages"])
    assert forwarded[-1] == body["messages"][-1]


def test_plain_response_length_rules() -> None:
    from proxy.server.core import responses

    ok = responses.plain(200, responses.JSON, b'{"a":1}', [(b"x-a", b"1")])
    assert ok.raw_headers[0] == (b"content-length", b"7")
    assert (b"x-a", b"1") in ok.raw_headers and ok.body == b'{"a":1}'
    # The upstream's own header wins over an extra of the same name; never two of them.
    dup = responses.plain(200, [(b"x-a", b"up")], b"", [(b"x-a", b"ours")])
    assert [v for k, v in dup.raw_headers if k == b"x-a"] == [b"up"]
    for status in (204, 304, 101):
        bare = responses.plain(status, [], b"")
        assert all(k != b"content-length" for k, _ in bare.raw_headers), status


def test_server_gc_settings() -> None:
    import gc

    from proxy.server.app.app import GC_YOUNG_THRESHOLD, tune_gc

    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *before[1:])
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_an_answer_carries_one_date_and_not_the_upstreams_server(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    """The upstream's `date` and `server` stay behind: the proxy's server sets its own."""
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    for stream in (False, True):
        r = httpx.post(proxy.url + "/v1/chat/completions", json={**body, "stream": stream})
        assert r.status_code == 200
        assert len(r.headers.get_list("date")) == 1
        assert len(r.headers.get_list("server")) <= 1  # the test server's own, at most
