"""Upstream faults: every one gives the client a clear answer, a usage row, and a healthy proxy."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.conftest import RunningProxy, free_port
from tests.fault_upstream import (
    ERROR_429,
    ERROR_503,
    HTML_500,
    REPLY,
    RETRY_AFTER,
    FaultUpstream,
    usage_rows,
    wait_until,
)

SMALL = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
STREAM = dict(SMALL, stream=True)
ERROR_KEYS = {"message", "type", "param", "code"}


@pytest.fixture
def fault() -> Iterator[FaultUpstream]:
    with FaultUpstream().running() as server:
        yield server


def fault_proxy(
    start_proxy: Any, policies_dir: Path, fault: FaultUpstream, upstream: str = "{timeout_s: 0.5}"
) -> RunningProxy:
    (policies_dir / "default.yaml").write_text(f"upstream: {upstream}\n")
    return start_proxy(upstream=fault.url)  # type: ignore[no-any-return]


def row_for(proxy: RunningProxy, response: httpx.Response) -> dict[str, Any]:
    """The usage row of this response (matched by x-request-id), waiting for the writer."""
    request_id = response.headers["x-request-id"]
    found: list[dict[str, Any]] = []

    def present() -> bool:
        found[:] = [r for r in usage_rows(proxy.usage_path, 0, 0) if r["request_id"] == request_id]
        return bool(found)

    assert wait_until(present), f"no usage row for {request_id}"
    assert len(found) == 1
    return found[0]


def assert_healthy(proxy: RunningProxy) -> None:
    assert httpx.get(proxy.url + "/healthz", timeout=5).status_code == 200
    ok = httpx.post(
        proxy.url + "/v1/chat/completions", json=SMALL, headers={"x-fault": "ok"}, timeout=5
    )
    assert ok.status_code == 200
    assert ok.json()["choices"][0]["message"]["content"] == REPLY


def assert_error_json(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == ERROR_KEYS
    assert error["code"] == code and error["type"] == "upstream_error"
    assert error["message"]


def sse_events(raw: bytes) -> list[Any]:
    """The data payloads of a complete SSE body, parsed (or the raw string for [DONE])."""
    assert raw.endswith(b"\n\n"), "the stream did not end on an event boundary"
    out: list[Any] = []
    for event in raw.split(b"\n\n"):
        data = b"".join(
            line[5:].strip() for line in event.splitlines() if line.startswith(b"data:")
        )
        if data:
            out.append("[DONE]" if data == b"[DONE]" else orjson.loads(data))
    return out


def stream_through(proxy: RunningProxy, mode: str) -> tuple[httpx.Response, bytes]:
    """POST a streamed request; read the whole body (raises if it does not end cleanly)."""
    with httpx.stream(
        "POST",
        proxy.url + "/v1/chat/completions",
        json=STREAM,
        headers={"x-fault": mode},
        timeout=8,
    ) as response:
        body = response.read()
    return response, body


@pytest.mark.parametrize(
    ("mode", "status", "code"),
    [
        ("silent", 504, "upstream_timeout"),  # nothing at all: timeout before headers
        ("stall_headers", 504, "upstream_timeout"),  # headers, then the body never comes
        ("plain_reset", 502, "upstream_unreachable"),  # reset half-way through the body
        ("garbage", 502, "upstream_unreachable"),  # not HTTP
        ("invalid_json", 502, "upstream_invalid_response"),
    ],
)
def test_plain_request_faults_give_openai_errors(
    start_proxy: Any, policies_dir: Path, fault: FaultUpstream, mode: str, status: int, code: str
) -> None:
    proxy = fault_proxy(start_proxy, policies_dir, fault)
    response = httpx.post(
        proxy.url + "/v1/chat/completions", json=SMALL, headers={"x-fault": mode}, timeout=8
    )
    assert_error_json(response, status, code)
    row = row_for(proxy, response)
    assert (row["status"], row["error"]) == (status, code)
    assert_healthy(proxy)


@pytest.mark.parametrize(
    ("mode", "status", "code"),
    [
        ("silent", 504, "upstream_timeout"),
        ("garbage", 502, "upstream_unreachable"),
    ],
)
def test_stream_faults_before_headers_give_openai_errors(
    start_proxy: Any, policies_dir: Path, fault: FaultUpstream, mode: str, status: int, code: str
) -> None:
    proxy = fault_proxy(start_proxy, policies_dir, fault)
    response, _ = stream_through(proxy, mode)
    assert_error_json(response, status, code)
    row = row_for(proxy, response)
    assert (row["status"], row["error"], row["stream"]) == (status, code, True)
    assert_healthy(proxy)


@pytest.mark.parametrize(
    ("mode", "events_before", "status", "code"),
    [
        ("stall_headers", 0, 504, "upstream_timeout"),  # sock_read timeout, nothing sent yet
        ("stream_stall", 2, 504, "upstream_timeout"),  # sock_read timeout mid-stream
        ("stream_reset", 2, 502, "upstream_stream_broken"),  # TCP reset mid-stream
    ],
)
def test_stream_faults_after_headers_end_with_an_error_event(
    start_proxy: Any,
    policies_dir: Path,
    fault: FaultUpstream,
    mode: str,
    events_before: int,
    status: int,
    code: str,
) -> None:
    proxy = fault_proxy(start_proxy, policies_dir, fault)
    response, body = stream_through(proxy, mode)
    assert response.status_code == 200
    events = sse_events(body)
    assert len(events) == events_before + 1
    assert all("choices" in e for e in events[:-1])
    assert set(events[-1]) == {"error"} and set(events[-1]["error"]) == ERROR_KEYS
    assert events[-1]["error"]["code"] == code
    row = row_for(proxy, response)
    assert (row["status"], row["error"], row["stream"]) == (status, code, True)
    assert_healthy(proxy)


def test_openai_client_raises_on_a_broken_stream(
    start_proxy: Any, policies_dir: Path, fault: FaultUpstream
) -> None:
    proxy = fault_proxy(start_proxy, policies_dir, fault)
    fault.mode = "stream_reset"
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-x", max_retries=0, timeout=8)
    seen: list[str] = []
    with pytest.raises(openai.APIError, match="ended abnormally"):
        for chunk in client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            seen.append(chunk.choices[0].delta.content or "")
    assert seen == ["w0 ", "w1 "]


def test_refused_connection_is_502(start_proxy: Any, policies_dir: Path, upstream: Any) -> None:
    (policies_dir / "default.yaml").write_text("upstream: {retries: 1}\n")
    proxy = start_proxy(upstream=f"http://127.0.0.1:{free_port()}/v1")
    for body in (SMALL, STREAM):
        response = httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=8)
        assert_error_json(response, 502, "upstream_unreachable")
        assert row_for(proxy, response)["error"] == "upstream_unreachable"
    assert httpx.get(proxy.url + "/healthz").status_code == 200


def test_dns_failure_is_502_and_fast(start_proxy: Any, policies_dir: Path, upstream: Any) -> None:
    # `.invalid` never resolves (RFC 6761); the resolver here says so at once.
    (policies_dir / "default.yaml").write_text("upstream: {connect_timeout_s: 3, timeout_s: 5}\n")
    proxy = start_proxy(upstream="http://no-such-upstream.invalid/v1")
    response = httpx.post(proxy.url + "/v1/chat/completions", json=SMALL, timeout=8)
    assert_error_json(response, 502, "upstream_unreachable")
    assert "invalid" not in response.json()["error"]["message"]  # no upstream address echoed
    assert row_for(proxy, response)["error"] == "upstream_unreachable"
    models = httpx.get(proxy.url + "/v1/models", timeout=8)
    assert_error_json(models, 502, "upstream_unreachable")
    assert httpx.get(proxy.url + "/healthz").status_code == 200


def test_html_error_page_passes_through(
    start_proxy: Any, policies_dir: Path, fault: FaultUpstream
) -> None:
    proxy = fault_proxy(start_proxy, policies_dir, fault)
    for body in (SMALL, STREAM):
        response = httpx.post(
            proxy.url + "/v1/chat/completions",
            json=body,
            headers={"x-fault": "html_500"},
            timeout=8,
        )
        assert response.status_code == 500
        assert response.content == HTML_500
        assert response.headers["x-request-id"]
        row = row_for(proxy, response)
        assert (row["status"], row["error"]) == (500, "upstream_500")
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-x", max_retries=0, timeout=8)
    fault.mode = "html_500"
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert_healthy(proxy)


def test_429_passes_through_with_retry_after_and_is_not_retried(
    start_proxy: Any, policies_dir: Path, fault: FaultUpstream
) -> None:
    proxy = fault_proxy(start_proxy, policies_dir, fault, "{timeout_s: 2, retries: 2}")
    for body in (SMALL, STREAM):
        before = len(fault.requests)
        response = httpx.post(
            proxy.url + "/v1/chat/completions", json=body, headers={"x-fault": "429"}, timeout=8
        )
        assert response.status_code == 429
        assert response.headers["retry-after"] == RETRY_AFTER
        assert response.content == ERROR_429
        assert len(fault.requests) == before + 1  # the client must slow down, not the proxy
        row = row_for(proxy, response)
        assert (row["status"], row["error"]) == (429, "upstream_429")
    assert_healthy(proxy)


def test_503_without_retries_passes_through(
    start_proxy: Any, policies_dir: Path, fault: FaultUpstream
) -> None:
    proxy = fault_proxy(start_proxy, policies_dir, fault)
    response = httpx.post(
        proxy.url + "/v1/chat/completions", json=SMALL, headers={"x-fault": "503"}, timeout=8
    )
    assert response.status_code == 503 and response.content == ERROR_503
    assert len(fault.requests) == 1
    assert row_for(proxy, response)["error"] == "upstream_503"


@pytest.mark.parametrize("body", [SMALL, STREAM], ids=["plain", "stream"])
def test_retries_turn_two_503s_into_a_200(
    start_proxy: Any, policies_dir: Path, fault: FaultUpstream, body: dict[str, Any]
) -> None:
    proxy = fault_proxy(start_proxy, policies_dir, fault, "{timeout_s: 2, retries: 2}")
    fault.mode, fault.fail_first = "flaky", 2
    response = httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=8)
    assert response.status_code == 200
    assert len(fault.requests) == 3
    assert fault.requests[0].body == fault.requests[2].body  # the same request, sent again
    row = row_for(proxy, response)
    assert (row["status"], row["error"]) == (200, None)
    if body is STREAM:
        assert sse_events(response.content)[-1] == "[DONE]"


def test_retries_are_bounded(start_proxy: Any, policies_dir: Path, fault: FaultUpstream) -> None:
    proxy = fault_proxy(start_proxy, policies_dir, fault, "{timeout_s: 2, retries: 2}")
    fault.mode, fault.fail_first = "flaky", 100
    response = httpx.post(proxy.url + "/v1/chat/completions", json=SMALL, timeout=8)
    assert response.status_code == 503
    assert len(fault.requests) == 3


def test_passthrough_streamed_body_is_not_retried(
    start_proxy: Any, policies_dir: Path, fault: FaultUpstream
) -> None:
    proxy = fault_proxy(start_proxy, policies_dir, fault, "{timeout_s: 2, retries: 2}")
    fault.mode, fault.fail_first = "flaky", 1
    payload = b"y" * 50_000

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(payload), 10_000):
            yield payload[i : i + 10_000]

    response = httpx.post(proxy.url + "/v1/files", content=chunks(), timeout=8)  # an upload
    assert response.status_code == 503
    assert len(fault.requests) == 1 and fault.requests[0].body == payload


def test_redirects_are_not_followed(
    start_proxy: Any, policies_dir: Path, fault: FaultUpstream
) -> None:
    with FaultUpstream().running() as elsewhere:
        proxy = fault_proxy(start_proxy, policies_dir, fault)
        fault.mode, fault.redirect_to = "redirect", elsewhere.url + "/chat/completions"
        response = httpx.post(proxy.url + "/v1/chat/completions", json=SMALL, timeout=8)
        models = httpx.get(proxy.url + "/v1/models", timeout=8)
        time.sleep(0.1)
        assert elsewhere.conns == []
    assert response.status_code == 302 and models.status_code == 302
