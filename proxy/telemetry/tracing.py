"""OpenTelemetry traces and metrics (the optional `otel` extra): one span per request with
the GenAI semantic conventions and the plan's figures, a child span for planning and one
for the upstream call, the client's W3C `traceparent` continued and passed upstream; and
the GenAI client metrics (`gen_ai.client.token.usage`, `gen_ai.client.operation.duration`)
with the tokens trimming saved (`context.tokens.trimmed`), by team and model.

Off unless an OTLP/HTTP endpoint is configured (`--otel`, CONTEXT_PROXY_OTEL or the
standard OTEL_EXPORTER_OTLP_ENDPOINT): then `open_tracing` imports the SDK and exports in
batches, off the request path. Spans carry names and numbers only: never message content,
never a key.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

    from proxy.usage import UsageRecord

PROVIDERS = {"messages": "anthropic"}  # the API the client called -> gen_ai.provider.name
EXPORT_TIMEOUT_S = 2  # an OTLP export (a span batch, the metrics) waits no longer
# The SDK's loggers that write what a client sent (a malformed `tracestate`, at WARNING on
# every request): quiet below ERROR.
CLIENT_ECHOING_LOGGERS = ("opentelemetry.trace.span", "opentelemetry.trace.propagation")


class Tracing:
    """The process's tracer; `begin` starts a request's trace."""

    def __init__(self, provider: TracerProvider, meters: MeterProvider) -> None:
        from opentelemetry.trace.propagation.tracecontext import (
            TraceContextTextMapPropagator,
        )

        self.provider, self.meters = provider, meters
        self.tracer: Tracer = provider.get_tracer("context-proxy")
        self.propagator = TraceContextTextMapPropagator()
        meter = meters.get_meter("context-proxy")
        self.token_usage: Histogram = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens used per request.",
        )
        self.duration: Histogram = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="Request duration.",
        )
        self.trimmed: Counter = meter.create_counter(
            "context.tokens.trimmed",
            unit="{token}",
            description="Prompt tokens trimming removed.",
        )

    def begin(self, headers: Mapping[str, str]) -> RequestTrace:
        # W3C caps a traceparent at 55 characters and a tracestate at 32 members of 256: a
        # longer header is not a trace context, and is not parsed (nor logged).
        carrier = {
            k: headers[k]
            for k, most in (("traceparent", 128), ("tracestate", 8192))
            if k in headers and len(headers[k]) <= most
        }
        return RequestTrace(self, self.propagator.extract(carrier=carrier))

    def close(self) -> None:
        self.provider.shutdown()  # exports what is left, each export within its timeout
        self.meters.shutdown(timeout_millis=EXPORT_TIMEOUT_S * 1000)


class RequestTrace:
    """One request's spans: the request's, started now; the upstream call's, started when
    the request goes upstream; planning's, written when the request is booked."""

    def __init__(self, tracing: Tracing, parent: Any) -> None:
        self.tracing = tracing
        self.parent = parent
        self.wall_ns, self.perf = time.time_ns(), time.perf_counter()
        self.span: Span = tracing.tracer.start_span("chat", context=parent, start_time=self.wall_ns)
        self.upstream: Span | None = None
        self.server: tuple[str | None, int | None] = (None, None)

    def at(self, perf: float) -> int:
        """A time.perf_counter() reading as wall-clock nanoseconds."""
        return self.wall_ns + int((perf - self.perf) * 1e9)

    def upstream_headers(self, url: str) -> list[tuple[str, str]]:
        """Start the upstream call's span; the `traceparent` (and `tracestate`) that make
        the upstream's own spans its children."""
        from opentelemetry import trace

        parts = urlsplit(url)
        self.server = (
            parts.hostname,
            parts.port or (443 if parts.scheme == "https" else 80),
        )
        context = trace.set_span_in_context(self.span)
        self.upstream = self.tracing.tracer.start_span("upstream", context=context)
        carrier: dict[str, str] = {}
        self.tracing.propagator.inject(carrier, context=trace.set_span_in_context(self.upstream))
        return list(carrier.items())

    def end(
        self,
        record: UsageRecord,
        upstream_started: float | None,
        upstream_ended: float | None,
        ended: float,
        model_label: str,
    ) -> None:
        """The request's spans ended with the row's figures; its metrics recorded under
        `model_label` (Prometheus's bounded label, not the client's raw model name)."""
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        api = record.api
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": PROVIDERS.get(api, "openai"),
            "gen_ai.request.model": record.model[:200],
            "gen_ai.usage.input_tokens": record.prompt_tokens,
            "gen_ai.usage.output_tokens": record.completion_tokens,
            "http.response.status_code": record.status,
            "context.api": api,
            "context.team": record.team,
            "context.policy": record.policy,
            "context.tokens_before": record.tokens_before,
            "context.tokens_after": record.tokens_after,
            "context.dropped": record.dropped,
            "context.truncated": record.truncated,
            "context.level": record.level.value,
            "context.usage_source": record.usage_source,
        }
        optional = {
            "context.budget": record.budget,
            "context.context_window": record.context_window,
            "context.cached_tokens": record.cached_tokens,
            "context.cost_usd": record.cost_usd,
            "server.address": self.server[0],
            "server.port": self.server[1],
            "error.type": record.error,
        }
        attributes.update({k: v for k, v in optional.items() if v is not None})
        span = self.span
        span.update_name(f"chat {record.model[:200]}")
        span.set_attributes(attributes)
        if record.status >= 500 or record.error == "upstream_stream_broken":
            span.set_status(Status(StatusCode.ERROR, record.error or ""))
        context = trace.set_span_in_context(span)
        planned_until = upstream_started if upstream_started is not None else ended
        plan = self.tracing.tracer.start_span("plan", context=context, start_time=self.wall_ns)
        plan.set_attributes(
            {
                "context.tokens_before": record.tokens_before,
                "context.tokens_after": record.tokens_after,
            }
        )
        plan.end(end_time=self.at(planned_until))
        if self.upstream is not None:
            self.upstream.set_attributes(
                {k: v for k, v in attributes.items() if k.startswith(("server.", "http."))}
            )
            self.upstream.end(
                end_time=self.at(upstream_ended if upstream_ended is not None else ended)
            )
        span.end(end_time=self.at(ended))
        tracing, labels = (
            self.tracing,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": attributes["gen_ai.provider.name"],
                "gen_ai.request.model": model_label,
                "context.team": record.team,
            },
        )
        if record.prompt_tokens:
            tracing.token_usage.record(
                record.prompt_tokens, {**labels, "gen_ai.token.type": "input"}
            )
        if record.completion_tokens:
            tracing.token_usage.record(
                record.completion_tokens, {**labels, "gen_ai.token.type": "output"}
            )
        tracing.duration.record((ended - self.perf), labels)
        if record.tokens_before > record.tokens_after:
            tracing.trimmed.add(record.tokens_before - record.tokens_after, labels)


def open_tracing(endpoint: str) -> Tracing:
    """Traces exported to the OTLP/HTTP `endpoint` (its /v1/traces) in batches, metrics to
    its /v1/metrics every minute (OTEL_METRIC_EXPORT_INTERVAL, in ms, sets another)."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter,
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    for name in CLIENT_ECHOING_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    base = endpoint.rstrip("/")
    resource = Resource.create({"service.name": "context-proxy"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=base + "/v1/traces", timeout=EXPORT_TIMEOUT_S),
            schedule_delay_millis=1000,
            export_timeout_millis=EXPORT_TIMEOUT_S * 1000,
        )
    )
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=base + "/v1/metrics", timeout=EXPORT_TIMEOUT_S),
        export_timeout_millis=EXPORT_TIMEOUT_S * 1000,
    )
    return Tracing(provider, MeterProvider(resource=resource, metric_readers=[reader]))
