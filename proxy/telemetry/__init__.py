"""OpenTelemetry traces, when configured (the optional `otel` extra)."""

from proxy.telemetry.tracing import RequestTrace, Tracing, open_tracing

__all__ = ["RequestTrace", "Tracing", "open_tracing"]
