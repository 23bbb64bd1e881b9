"""Chat completions and the recall tool: its calls read from an answer, the continuation
sent upstream, and the one answer (or stream) the client gets.

A stream is spliced chunk by chunk: text and the client's tool calls go on at once (the
client's calls renumbered from 0, as if the recall call were never made); the recall call's
deltas, the finish chunk, the usage chunk and `[DONE]` of a round that is continued are
withheld; the continuation's chunks carry the first round's id, without a second role.
"""

from __future__ import annotations

from typing import Any

from proxy.recall.events import DONE, Call, Round, add_usage, as_dict, encode, parse
from proxy.recall.tool import TOOL_NAME


def _message(answer: dict[str, Any]) -> dict[str, Any]:
    choices = answer.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    return message if isinstance(message, dict) else {}


def plain_round(answer: dict[str, Any]) -> Round:
    """The recall calls, the client's calls and the usage of a plain answer."""
    found = Round(usage=answer.get("usage"))
    for call in _message(answer).get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and function.get("name") == TOOL_NAME:
            found.calls.append(Call(str(call.get("id")), function.get("arguments") or ""))
        else:
            found.client_calls += 1
    return found


def continued(
    body: dict[str, Any], answer: dict[str, Any], results: list[tuple[str, str]]
) -> dict[str, Any]:
    """The forwarded body, the model's message (its recall calls) and the tool's answers."""
    said = _message(answer)
    message: dict[str, Any] = {"role": "assistant", "content": said.get("content")}
    if said.get("tool_calls"):
        message["tool_calls"] = said["tool_calls"]
    answers = [{"role": "tool", "tool_call_id": i, "content": text} for i, text in results]
    return {**body, "messages": [*body.get("messages", ()), message, *answers]}


def streamed(text: str, calls: list[Call]) -> dict[str, Any]:
    """A streamed round as the answer it was (for its continuation): its text and its
    recall calls."""
    made = [
        {"id": c.id, "type": "function", "function": {"name": TOOL_NAME, "arguments": c.arguments}}
        for c in calls
    ]
    message = {"role": "assistant", "content": text or None, "tool_calls": made}
    return {"choices": [{"message": message}]}


def client_answer(rounds: list[dict[str, Any]], usage: Any) -> dict[str, Any]:
    """The one answer the client gets: the first round's id, every round's text in order,
    the last round's calls of the client's tools, its finish reason (a stop when only the
    recall tool was left to call), and the usage of every round summed."""
    last = rounds[-1]
    text = "".join(str(_message(r).get("content") or "") for r in rounds)
    message = dict(_message(last))
    message["content"] = text or None
    calls = [
        c for c in message.get("tool_calls") or () if not (
            isinstance(c, dict) and isinstance(c.get("function"), dict)
            and c["function"].get("name") == TOOL_NAME
        )
    ]  # fmt: skip
    if calls:
        message["tool_calls"] = calls
    else:
        message.pop("tool_calls", None)
    choice = dict(last["choices"][0])
    choice["message"] = message
    if not calls and choice.get("finish_reason") == "tool_calls":
        choice["finish_reason"] = "stop"
    out = {**last, "id": rounds[0].get("id", last.get("id")), "choices": [choice]}
    if usage is not None:
        out["usage"] = usage
    return out


class ChatSplicer:
    """A chat stream's chunks, round after round, as the client gets them."""

    def __init__(self) -> None:
        self.id: Any = None
        self.round = 0
        self.usage: Any = None  # of the rounds so far, summed
        self.recalled = Round()
        self._where: dict[int, int | None] = {}  # upstream index -> the client's (None: ours)
        self._ours: dict[int, Call] = {}
        self._texts: list[str] = []
        self._finish: list[dict[str, Any]] = []
        self._last: dict[str, Any] = {}  # the newest chunk's fields, for the closing ones

    def next_round(self) -> None:
        self.round += 1
        self.recalled = Round()
        self._where, self._ours, self._texts, self._finish = {}, {}, [], []

    def feed(self, event: bytes) -> bytes:
        """What the client gets of one upstream event (nothing, while it is withheld)."""
        _, data = parse(event)
        if data == "[DONE]":
            return b""  # the closing sends one
        if not isinstance(data, dict) or "error" in data:
            return event
        if self.id is None:
            self.id = data.get("id")
        data["id"] = self.id
        self._last = {k: data[k] for k in ("object", "created", "model") if k in data}
        usage = data.get("usage")
        if isinstance(usage, dict):
            self.usage = add_usage(self.usage, usage)
            self.recalled.usage = usage
            data["usage"] = None
        kept = [c for c in data.get("choices") or () if self._choice(c)]
        if not kept:
            return b""
        data["choices"] = kept
        return encode(data)

    def _choice(self, choice: Any) -> bool:
        """Whether a choice's delta has anything left for the client once the recall
        call's parts, a later round's role and the finish reason are taken out."""
        if not isinstance(choice, dict):
            return False
        delta = choice.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        if self.round:
            delta.pop("role", None)
        if isinstance(delta.get("content"), str):
            self._texts.append(delta["content"])
        if delta.get("tool_calls"):
            delta["tool_calls"] = [c for c in delta["tool_calls"] if self._call(c)]
            if not delta["tool_calls"]:
                del delta["tool_calls"]
        if choice.get("finish_reason"):
            index = choice.get("index", 0)
            self._finish.append(
                {"index": index, "delta": {}, "finish_reason": choice["finish_reason"]}
            )
            choice["finish_reason"] = None
        return any(v not in (None, "", [], {}) for v in delta.values())

    def _call(self, call: Any) -> bool:
        """Whether a tool-call delta goes to the client (renumbered from 0); the recall
        tool's are kept back, their arguments gathered."""
        if not isinstance(call, dict):
            return False
        index = call.get("index", 0)
        function = as_dict(call.get("function"))
        if index not in self._where:
            if function.get("name") == TOOL_NAME:
                self._where[index] = None
                self._ours[index] = Call(str(call.get("id")), "")
                self.recalled.calls.append(self._ours[index])
            else:
                self._where[index] = self.recalled.client_calls
                self.recalled.client_calls += 1
        where = self._where[index]
        if where is None:
            self._ours[index].arguments += str(function.get("arguments") or "")
            return False
        call["index"] = where
        return True

    def closing(self) -> bytes:
        """The end the client gets: the finish chunk (a stop where only the recall tool was
        left to call), the usage of every round, `[DONE]`."""
        out = b""
        base = {"id": self.id, **self._last}
        for finish in self._finish:
            if finish["finish_reason"] == "tool_calls" and not self.recalled.client_calls:
                finish["finish_reason"] = "stop"
        if self._finish:
            out += encode({**base, "choices": self._finish, "usage": None})
        if self.usage is not None:
            out += encode({**base, "choices": [], "usage": self.usage})
        return out + DONE

    @property
    def answer(self) -> dict[str, Any]:
        """The round as the answer it was (for its continuation): its text and its recall
        calls."""
        return streamed("".join(self._texts), self.recalled.calls)
