"""Anthropic's Messages API and the recall tool: its `tool_use` blocks read from an answer,
the continuation sent upstream (the model's blocks as they came, thinking and signatures
included, then the tool's results), and the one message (or stream) the client gets.

A stream is spliced event by event: every content block but the recall tool's goes on at
once, its index counted without the recall blocks and after the blocks of earlier rounds; a
later round's `message_start` is withheld, and so are the `message_delta` and
`message_stop` of a round that is continued. The one `message_delta` carries the stop
reason (an end of turn where only the recall tool was left to call) and the usage of
every round summed.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.recall.events import Call, Round, add_usage, as_dict, encode, parse
from proxy.recall.tool import TOOL_NAME

_TEXT_DELTAS = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature"}


def _ours(block: Any) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "tool_use"
        and (block.get("name") == TOOL_NAME)
    )


def _content(answer: dict[str, Any]) -> list[Any]:
    content = answer.get("content")
    return content if isinstance(content, list) else []


def plain_round(answer: dict[str, Any]) -> Round:
    """The recall calls, the client's calls and the usage of a plain message."""
    found = Round(usage=answer.get("usage"))
    for block in _content(answer):
        if _ours(block):
            found.calls.append(Call(str(block.get("id")), block.get("input")))
        elif isinstance(block, dict) and block.get("type") == "tool_use":
            found.client_calls += 1
    return found


def continued(
    body: dict[str, Any], answer: dict[str, Any], results: list[tuple[str, str]]
) -> dict[str, Any]:
    """The forwarded body, the model's message (every block as it came) and the tool's
    results in the next user message."""
    said = {"role": "assistant", "content": _content(answer)}
    answers = [{"type": "tool_result", "tool_use_id": i, "content": t} for i, t in results]
    messages = [*body.get("messages", ()), said, {"role": "user", "content": answers}]
    return {**body, "messages": messages}


def client_answer(rounds: list[dict[str, Any]], usage: Any) -> dict[str, Any]:
    """The one message the client gets: the first round's id, every round's blocks but the
    recall tool's, the last round's stop reason (an end of turn where only the recall tool
    was left to call), the usage of every round summed."""
    content = [b for r in rounds for b in _content(r) if not _ours(b)]
    out = {**rounds[-1], "id": rounds[0].get("id", rounds[-1].get("id")), "content": content}
    if out.get("stop_reason") == "tool_use" and not any(
        isinstance(b, dict) and b.get("type") == "tool_use" for b in content
    ):
        out["stop_reason"] = "end_turn"
    if usage is not None:
        out["usage"] = usage
    return out


class MessagesSplicer:
    """A Messages stream's events, round after round, as the client gets them."""

    def __init__(self) -> None:
        self.round = 0
        self.usage: Any = None  # of the rounds so far, summed
        self.recalled = Round()
        self.answer: dict[str, Any] = {}  # the round's message, rebuilt from its events
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, str] = {}
        self._ours: dict[int, Call] = {}
        self._offset = 0
        self._sent = 0  # blocks the client got, every round's
        self._round_usage: dict[str, Any] = {}
        self._delta: dict[str, Any] | None = None

    def next_round(self) -> None:
        self.round += 1
        self._offset = self._sent
        self.recalled, self._ours, self._delta, self.answer = Round(), {}, None, {}
        self._blocks, self._json, self._round_usage = {}, {}, {}

    def feed(self, event: bytes) -> bytes:
        """What the client gets of one upstream event (nothing, while it is withheld)."""
        name, data = parse(event)
        if not isinstance(data, dict):
            return event
        kind = data.get("type", name)
        if kind == "message_start":
            message = as_dict(data.get("message"))
            self._round_usage = dict(message.get("usage") or {})
            self.answer = {**message, "content": []}
            return b"" if self.round else event
        if kind == "message_delta":
            self._round_usage.update(
                {k: v for k, v in (data.get("usage") or {}).items() if v is not None}
            )
            self._delta = data
            self._end_round()
            return b""
        if kind == "message_stop":
            return b""
        index = data.get("index")
        if kind not in ("content_block_start", "content_block_delta", "content_block_stop") or (
            not isinstance(index, int)
        ):
            return event
        self._read_block(kind, index, data)
        if index in self._ours:
            return b""
        data["index"] = self._offset + index - sum(1 for k in self._ours if k < index)
        if kind == "content_block_start":
            self._sent += 1
        return encode(data, name)

    def _read_block(self, kind: str, index: int, data: dict[str, Any]) -> None:
        """The round's blocks rebuilt from their events (for its continuation)."""
        if kind == "content_block_start":
            block = dict(data.get("content_block") or {})
            self._blocks[index] = block
            if _ours(block):
                self._ours[index] = Call(str(block.get("id")), {})
                self.recalled.calls.append(self._ours[index])
            elif block.get("type") == "tool_use":
                self.recalled.client_calls += 1
            return
        block = self._blocks.setdefault(index, {})
        delta = as_dict(data.get("delta"))
        if kind == "content_block_delta":
            key = _TEXT_DELTAS.get(str(delta.get("type")))
            if key is not None:
                block[key] = str(block.get(key) or "") + str(delta.get(key) or "")
            elif delta.get("type") == "input_json_delta":
                self._json[index] = self._json.get(index, "") + str(delta.get("partial_json") or "")
            return
        if index in self._json:  # the stop: a tool's input is whole
            try:
                block["input"] = orjson.loads(self._json.pop(index) or "{}")
            except orjson.JSONDecodeError:
                block["input"] = {}
            if index in self._ours:
                self._ours[index].arguments = block["input"]

    def _end_round(self) -> None:
        self.answer["content"] = [self._blocks[k] for k in sorted(self._blocks)]
        self.recalled.usage = dict(self._round_usage)
        self.usage = add_usage(self.usage, self._round_usage)

    def closing(self) -> bytes:
        """The end the client gets: one `message_delta` (its stop reason, every round's
        usage summed) and `message_stop`."""
        if self._delta is None:
            return b""
        delta = dict(self._delta)
        inner = dict(as_dict(delta.get("delta")))
        if inner.get("stop_reason") == "tool_use" and not self.recalled.client_calls:
            inner["stop_reason"] = "end_turn"
        delta["delta"] = inner
        delta["usage"] = self.usage
        return encode(delta, "message_delta") + encode({"type": "message_stop"}, "message_stop")
