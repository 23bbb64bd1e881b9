"""Server-sent events of Anthropic's Messages API: every typed event relayed as it comes;
usage read from `message_start` (the prompt's counts) and `message_delta` (the output so
far, and any count it repeats)."""

from __future__ import annotations

from typing import Any

from proxy.anthropic.answer import anthropic_usage
from proxy.upstream.sse import MAX_KEPT_BYTES, StreamTap, _json_payload

_DELTA_KEYS = ("text", "thinking", "partial_json")


class MessagesTap(StreamTap):
    """StreamTap's bounded event splitting; nothing is removed from the stream."""

    def __init__(self, max_kept_bytes: int = MAX_KEPT_BYTES) -> None:
        super().__init__(True, max_kept_bytes)  # True: no usage is removed from the events
        self.counts: dict[str, Any] = {}
        self.ended = False

    @property
    def finished(self) -> bool:
        """The final `message_delta` came (it holds the stop reason and the output count)."""
        return self.ended

    def _inspect(self, event: bytes) -> bytes:
        # Only events with a `"usage"` key get here (message_start, message_delta), or [DONE].
        parsed = _json_payload(event) if b'"usage"' in event else None
        if parsed is not None:
            kind = parsed.get("type")
            message = parsed.get("message")
            usage = message.get("usage") if isinstance(message, dict) else parsed.get("usage")
            if isinstance(usage, dict):
                self.counts.update({k: v for k, v in usage.items() if v is not None})
                self.usage = anthropic_usage(self.counts)
            if kind == "message_delta":
                self.ended = True
        self._keep(event)
        return event

    def text(self) -> str:
        deltas = (event.get("delta") for event in self.kept_deltas())
        return "".join(
            delta[k] for delta in deltas if isinstance(delta, dict)
            for k in _DELTA_KEYS if isinstance(delta.get(k), str)
        )  # fmt: skip
