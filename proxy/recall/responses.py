"""The Responses API and the recall tool: its calls read from an answer's output items, the
continuation sent upstream, and the one response (or stream) the client gets.

A stream is spliced event by event: every item but the recall call's goes on at once, its
`output_index` counted without the recall calls and after the items of earlier rounds, and
every event's `sequence_number` counted afresh; a later round's `response.created` and
`response.in_progress` are withheld, and so is the final event of a round that is
continued. The one final event carries the first round's id, every round's items and the
usage of every round summed.
"""

from __future__ import annotations

from typing import Any

from proxy.recall.events import Call, Round, add_usage, as_dict, encode, parse
from proxy.recall.tool import TOOL_NAME

# Items the client's own code acts on (the provider's built-in tools run at the provider).
CLIENT_CALLS = frozenset(
    (
        "function_call",
        "custom_tool_call",
        "computer_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "mcp_approval_request",
    )
)
_FINAL = frozenset(("response.completed", "response.incomplete", "response.failed"))
_OPENING = frozenset(("response.created", "response.in_progress", "response.queued"))


def _ours(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and item.get("type") == "function_call"
        and (item.get("name") == TOOL_NAME)
    )


def _output(answer: dict[str, Any]) -> list[Any]:
    output = answer.get("output")
    return output if isinstance(output, list) else []


def plain_round(answer: dict[str, Any]) -> Round:
    """The recall calls, the client's calls and the usage of a plain response."""
    found = Round(usage=answer.get("usage"))
    for item in _output(answer):
        if _ours(item):
            found.calls.append(Call(str(item.get("call_id")), item.get("arguments") or ""))
        elif isinstance(item, dict) and item.get("type") in CLIENT_CALLS:
            found.client_calls += 1
    return found


def continued(
    body: dict[str, Any], answer: dict[str, Any], results: list[tuple[str, str]]
) -> dict[str, Any]:
    """The forwarded body, the model's output items and the tool's answers as input."""
    given = body.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or ())
    outputs = [{"type": "function_call_output", "call_id": i, "output": t} for i, t in results]
    return {**body, "input": [*items, *_output(answer), *outputs]}


def client_answer(rounds: list[dict[str, Any]], usage: Any) -> dict[str, Any]:
    """The one response the client gets: the first round's id, every round's items but the
    recall calls, the last round's status, the usage of every round summed."""
    output = [item for r in rounds for item in _output(r) if not _ours(item)]
    out = {**rounds[-1], "id": rounds[0].get("id", rounds[-1].get("id")), "output": output}
    if usage is not None:
        out["usage"] = usage
    return out


class ResponsesSplicer:
    """A Responses stream's events, round after round, as the client gets them."""

    def __init__(self) -> None:
        self.round = 0
        self.usage: Any = None
        self.recalled = Round()
        self.first: dict[str, Any] | None = None  # the first round's response object
        self.items: list[Any] = []  # the items the client got, every round's
        self.answer: dict[str, Any] = {}  # the round's final response object
        self._ours: dict[int, Call] = {}
        self._offset = 0
        self._seq = 0
        self._final: tuple[str | None, dict[str, Any]] | None = None

    def next_round(self) -> None:
        self.round += 1
        self._offset = len(self.items)
        self.recalled, self._ours, self._final, self.answer = Round(), {}, None, {}

    def feed(self, event: bytes) -> bytes:
        """What the client gets of one upstream event (nothing, while it is withheld)."""
        name, data = parse(event)
        if not isinstance(data, dict):
            return b"" if data == "[DONE]" else event
        kind = data.get("type", name)
        response = data.get("response")
        if kind in _OPENING:
            if self.round or not isinstance(response, dict):
                return b""
            self.first = self.first or response
        if kind in _FINAL and isinstance(response, dict):
            self._final = (name, data)
            self.answer = response
            self.recalled.usage = response.get("usage")
            self.usage = add_usage(self.usage, response.get("usage"))
            for item in _output(response):
                if isinstance(item, dict) and item.get("type") in CLIENT_CALLS and not _ours(item):
                    self.recalled.client_calls += 1
            return b""
        if kind == "error":
            return event
        index = data.get("output_index")
        if isinstance(index, int):
            item = data.get("item")
            if kind == "response.output_item.added" and _ours(item):
                self._ours[index] = Call(str(as_dict(item).get("call_id")), "")
                self.recalled.calls.append(self._ours[index])
            if index in self._ours:
                if kind == "response.output_item.done" and isinstance(item, dict):
                    self._ours[index].arguments = item.get("arguments") or ""
                return b""
            data["output_index"] = self._offset + index - sum(1 for k in self._ours if k < index)
            if kind == "response.output_item.done":
                self.items.append(item)
        return self._emit(name, data)

    def _emit(self, name: str | None, data: dict[str, Any]) -> bytes:
        if "sequence_number" in data:
            data["sequence_number"] = self._seq
            self._seq += 1
        return encode(data, name)

    def closing(self) -> bytes:
        """The final event the client gets: the first round's id, every item it got, the
        usage of every round summed."""
        if self._final is None:
            return b""
        name, data = self._final
        response = dict(data["response"])
        if self.first is not None:
            response["id"] = self.first.get("id", response.get("id"))
        response["output"] = [i for i in self.items if i is not None]
        if self.usage is not None:
            response["usage"] = self.usage
        return self._emit(name, {**data, "response": response})
