"""OpenTelemetry traces against a real OTLP/HTTP receiver (an ASGI app on a loopback port
that decodes the protobuf the exporter sends): a span per request with the GenAI semantic
conventions and the plan's figures, children for planning and the upstream call, the
client's traceparent continued and passed upstream; no content, no key."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.conftest import serve
from tests.fake_upstream import FakeUpstream

TRACE_ID, PARENT_ID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
SECRET = "the-secret-words-of-this-request"


class Receiver:
    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.metrics: dict[str, list[Any]] = {}

    async def metrics_in(self, request: Request) -> Response:
        export = ExportMetricsServiceRequest()
        export.ParseFromString(await request.body())
        for resource in export.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    self.metrics.setdefault(metric.name, []).append(metric)
        return Response(b"", media_type="application/x-protobuf")

    async def traces(self, request: Request) -> Response:
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.body())
        for resource in export.resource_spans:
            for scope in resource.scope_spans:
                self.spans.extend(scope.spans)
        return Response(b"", media_type="application/x-protobuf")

    def wait(self, count: int) -> list[Any]:
        deadline = time.monotonic() + 15
        while len(self.spans) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        return list(self.spans)


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    collector = Receiver()
    app = Starlette(routes=[
        Route("/v1/traces", collector.traces, methods=["POST"]),
        Route("/v1/metrics", collector.metrics_in, methods=["POST"]),
    ])  # fmt: skip
    with serve(app) as url:
        yield collector, url


def attributes(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value"))
    return out


def test_a_request_is_one_span_with_its_plan_and_the_upstream_call(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, receiver: tuple[Receiver, str],
    monkeypatch: Any,
) -> None:  # fmt: skip
    collector, url = receiver
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "300")
    (policies_dir / "default.yaml").write_text(
        "budget: {reserve_output: false}\nmodels:\n  gpt-4o: {context_window: 2000}\n"
    )
    proxy = start_proxy(otel=url)
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-caller-key", max_retries=0)
    messages = [{"role": "user", "content": f"{SECRET} {k} " + "word " * 100} for k in range(20)]
    client.chat.completions.create(
        model="gpt-4o", messages=messages,  # type: ignore[arg-type]
        extra_headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
    )  # fmt: skip
    spans = collector.wait(3)
    by_name = {s.name: s for s in spans}
    request, plan, call = by_name["chat gpt-4o"], by_name["plan"], by_name["upstream"]
    assert request.trace_id.hex() == TRACE_ID and request.parent_span_id.hex() == PARENT_ID
    assert plan.parent_span_id == request.span_id == call.parent_span_id
    facts = attributes(request)
    assert facts["gen_ai.operation.name"] == "chat" and facts["gen_ai.request.model"] == "gpt-4o"
    assert facts["gen_ai.provider.name"] == "openai"
    assert facts["gen_ai.usage.input_tokens"] > 0 and "gen_ai.usage.output_tokens" in facts
    assert facts["context.tokens_before"] > facts["context.tokens_after"] > 0
    assert facts["context.dropped"] > 0 and facts["context.team"] == "default"
    assert facts["server.address"] == "127.0.0.1" and facts["http.response.status_code"] == 200
    sent = upstream.chat_requests[-1].headers["traceparent"]
    assert sent == f"00-{TRACE_ID}-{call.span_id.hex()}-01"  # the upstream's parent: our call
    everything = b"".join(s.SerializeToString() for s in spans)
    assert SECRET.encode() not in everything and b"sk-caller-key" not in everything
    deadline = time.monotonic() + 15
    while "context.tokens.trimmed" not in collector.metrics and time.monotonic() < deadline:
        time.sleep(0.1)
    usage = collector.metrics["gen_ai.client.token.usage"][-1].histogram.data_points
    kinds = {
        next(a.value.string_value for a in p.attributes if a.key == "gen_ai.token.type")
        for p in usage
    }
    assert kinds == {"input", "output"}
    assert "gen_ai.client.operation.duration" in collector.metrics
    trimmed = collector.metrics["context.tokens.trimmed"][-1].sum.data_points[0].as_int
    assert trimmed == facts["context.tokens_before"] - facts["context.tokens_after"]
    assert request.start_time_unix_nano <= plan.start_time_unix_nano
    assert plan.end_time_unix_nano <= call.end_time_unix_nano <= request.end_time_unix_nano


def test_a_messages_request_is_traced_as_anthropics(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, fake_upstream_server: Any,
    receiver: tuple[Receiver, str],
) -> None:  # fmt: skip
    collector, url = receiver
    _, base = fake_upstream_server
    (policies_dir / "default.yaml").write_text(f"upstream: {{anthropic: {{base_url: '{base}'}}}}\n")
    proxy = start_proxy(otel=url)
    sdk = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-caller", max_retries=0)
    sdk.messages.create(
        model="claude-sonnet-4-6", max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
    )
    spans = collector.wait(3)
    request = next(s for s in spans if s.name.startswith("chat "))
    facts = attributes(request)
    assert facts["gen_ai.provider.name"] == "anthropic" and facts["context.api"] == "messages"
    assert facts["context.cached_tokens"] >= 0
    assert "traceparent" in upstream.messages_requests[-1].headers


def test_without_an_endpoint_nothing_is_traced(proxy: Any, upstream: FakeUpstream) -> None:
    httpx.post(proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": [
        {"role": "user", "content": "Hi"}]}, headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})  # fmt: skip
    assert upstream.chat_requests[-1].headers["traceparent"] == f"00-{TRACE_ID}-{PARENT_ID}-01"


def test_a_clients_trace_headers_never_reach_the_log_and_models_stay_bounded(
    start_proxy: Any, upstream: FakeUpstream, receiver: tuple[Receiver, str], monkeypatch: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """50 requests with a malformed `tracestate` and 300 invented model names: nothing of the
    header is logged, and the exported metrics name the models by Prometheus's bounded
    labels ("other"), not 300 series."""
    collector, url = receiver
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "300")
    proxy = start_proxy(otel=url)
    state = "x" * 7000 + ",bad key=!!," + "marker-in-tracestate"
    with httpx.Client(base_url=proxy.url) as http:
        for k in range(300):
            http.post("/v1/chat/completions", json={
                "model": f"invented-{k}", "messages": [{"role": "user", "content": "hi"}],
            }, headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01", "tracestate": state}
                if k < 50 else {})  # fmt: skip
    assert not [r for r in caplog.records if "marker-in-tracestate" in r.getMessage()]
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry.trace")]
    deadline = time.monotonic() + 15
    names: set[str] = set()
    while time.monotonic() < deadline and "duration" not in str(collector.metrics.keys()):
        time.sleep(0.1)
    time.sleep(0.5)
    for metric in collector.metrics.get("gen_ai.client.operation.duration", []):
        for point in metric.histogram.data_points:
            names |= {a.value.string_value for a in point.attributes
                      if a.key == "gen_ai.request.model"}  # fmt: skip
    assert names and len(names) <= 3 and not any(n.startswith("invented-") for n in names)


def test_a_hung_collector_neither_delays_a_stop_long_nor_costs_a_usage_row(
    tmp_path: Path, upstream_url: str
) -> None:
    """The OTLP endpoint accepts connections and never answers: on SIGTERM the usage log
    is closed first (the row is on disk) and each export gives up after its timeout."""
    import signal
    import socket
    import subprocess

    from tests.conftest import free_port
    from tests.processes import serve_command, wait_ready

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)  # accepts, never reads or answers
    collector = f"http://127.0.0.1:{hung.getsockname()[1]}"
    (tmp_path / "policies").mkdir()
    port, log = free_port(), tmp_path / "usage.jsonl"
    command = serve_command(port, tmp_path / "policies", upstream_url, log, "--otel", collector)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, process)
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(url + "/v1/chat/completions", json=body).status_code == 200
        time.sleep(1.5)  # the span batch is on its way to the hung collector
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)  # it was 26-28 s with the exporter's own retries
        assert log.read_bytes().count(b"\n") == 1
    finally:
        if process.poll() is None:
            process.kill()
        hung.close()
