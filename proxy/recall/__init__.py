"""Recall: what a plan left out, served back to the model on request, from the request in
flight. The proxy's own tool (`tool.py`), the lookup of what an id or a query names
(`lookup.py`), the tool's answer (`answer.py`), and for each API how its answers and
streams are read, continued and spliced for the client (`chat.py`, `responses.py`,
`messages.py`). Pure: the rounds themselves are the server's (server/pipeline/recall_step.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.recall import chat, messages, responses
from proxy.recall.answer import MAX_CALLS, Recalled, answer, answer_round
from proxy.recall.events import Call, EventSplitter, Round, add_usage
from proxy.recall.lookup import Recallable
from proxy.recall.tool import TOOL_NAME, declaration, may_declare, with_tool


class Splicer(Protocol):
    """A stream's events, round after round, as the client gets them."""

    round: int
    usage: Any
    recalled: Round

    def feed(self, event: bytes) -> bytes: ...

    def closing(self) -> bytes: ...

    def next_round(self) -> None: ...

    @property
    def answer(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Api:
    """How one API's answers are read, continued and merged for the client."""

    name: str
    plain_round: Callable[[dict[str, Any]], Round]
    continued: Callable[[dict[str, Any], dict[str, Any], list[tuple[str, str]]], dict[str, Any]]
    client_answer: Callable[[list[dict[str, Any]], Any], dict[str, Any]]
    splicer: Callable[[], Splicer]


APIS = {
    "chat": Api("chat", chat.plain_round, chat.continued, chat.client_answer, chat.ChatSplicer),
    "responses": Api(
        "responses",
        responses.plain_round,
        responses.continued,
        responses.client_answer,
        responses.ResponsesSplicer,
    ),
    "messages": Api(
        "messages",
        messages.plain_round,
        messages.continued,
        messages.client_answer,
        messages.MessagesSplicer,
    ),
}

__all__ = [
    "APIS",
    "MAX_CALLS",
    "TOOL_NAME",
    "Api",
    "Call",
    "EventSplitter",
    "Recallable",
    "Recalled",
    "Round",
    "Splicer",
    "add_usage",
    "answer",
    "answer_round",
    "declaration",
    "may_declare",
    "with_tool",
]
