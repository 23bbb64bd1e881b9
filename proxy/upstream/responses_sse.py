"""Server-sent events of the Responses API: typed events relayed as they come, usage read
from the final `response.completed` (or `.incomplete`, `.failed`) event."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.upstream.sse import MAX_KEPT_BYTES, StreamTap, _json_payload

# The events whose deltas are generated tokens, for estimating them without usage.
_DELTAS = frozenset(
    (
        "response.output_text.delta",
        "response.refusal.delta",
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
    )
)


_FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


class ResponsesTap(StreamTap):
    """StreamTap's bounded event splitting; nothing is removed from the stream (Responses
    events always carry their usage, the client gets every event as the upstream sent it)."""

    def __init__(self, max_kept_bytes: int = MAX_KEPT_BYTES) -> None:
        super().__init__(True, max_kept_bytes)  # True: no usage is removed from the events
        self.ended = False

    @property
    def finished(self) -> bool:
        """The final event came (response.completed, .incomplete or .failed: each holds
        the response object, with its `usage` key)."""
        return self.ended

    def _inspect(self, event: bytes) -> bytes:
        # Only events with a `"usage"` key get here, or a [DONE]; the final response's usage
        # is in `response.usage` (created and in_progress events carry `usage: null`).
        if b'"usage"' in event:
            parsed = _json_payload(event)
            response = parsed.get("response") if parsed is not None else None
            usage = response.get("usage") if isinstance(response, dict) else None
            kind = parsed.get("type") if parsed is not None else None
            if isinstance(kind, str) and kind in _FINAL:
                self.ended = True
            if isinstance(usage, dict):
                self.usage = usage  # Exchange.take_usage reads the Responses names
        self._keep(event)
        return event

    def text(self) -> str:
        return "".join(
            event["delta"]
            for event in self.kept_deltas()
            if event.get("type") in _DELTAS and isinstance(event.get("delta"), str)
        )


def response_error_event(message: str, type_: str, code: str) -> bytes:
    """A broken Responses stream's last event: the API's own `error` event shape, plus an
    `error` object, which the openai SDK raises as an APIError (it raises on any event whose
    data holds an `error` object) instead of waiting for a `response.completed`."""
    error = {"message": message, "type": type_, "param": None, "code": code}
    data: dict[str, Any] = {"type": "error", "code": code, "message": message, "param": None}
    data["error"] = error
    return b"event: error\ndata: " + orjson.dumps(data) + b"\n\n"
