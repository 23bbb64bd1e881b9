"""Planner vocabulary: the items a request's messages are cut into, and what is decided for each."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from proxy.types import Priority, Section

MARKER = "\n[…truncated]"  # appended to every truncated item: the cut must be visible


class Action(str, Enum):
    KEEP = "keep"
    TRUNCATE = "truncate"
    DROP = "drop"
    DEDUPE = "dedupe"
    SUMMARIZE = "summarize"  # dropped, and a summary of its cluster took its place
    SUMMARY_INSERTED = "summary-inserted"


# Why an item was dropped for want of room, by its priority (both planning paths say it).
OVER_BUDGET = {p: f"over budget ({p.value} priority)" for p in Priority}


class Kind(str, Enum):
    MESSAGE = "message"  # a whole message's own text (or its text outside blocks)
    BLOCK = "block"  # an inline <context> block
    HEADING = "heading"  # a markdown-heading section of a system message
    OPAQUE = "opaque"  # a message of an unknown shape: forwarded untouched
    SUMMARY = "summary"  # a proxy-made summary (extra_summaries), not in the request


@dataclass(slots=True)
class Item:
    """One unit of text with a section and a priority; the planner keeps, cuts or drops it."""

    key: int
    msg: int  # message index in the request (a proxy summary: the first index it covers)
    role: str
    kind: Kind
    section: Section
    priority: Priority
    text: str
    tag: str  # how the section was found: x_context, inline, heading, default
    id: str | None = None
    cluster: str | None = None
    score: float | None = None
    summary_of: tuple[str, ...] = ()
    current: bool = False  # part of the current turn
    plain: bool = True  # text only (no images, no tool calls): may be deduped by content
    cost: int = 0

    @property
    def required(self) -> bool:
        return self.priority is Priority.REQUIRED


@dataclass(slots=True)
class Part:
    """Where a message's text lives: its string content (`index` None) or one text part."""

    index: int | None
    pieces: list[tuple[int, str]]  # (item key, text), in order; their join is the forwarded text


@dataclass(slots=True)
class MessageLayout:
    index: int
    original: Any
    stripped: Any  # the message as forwarded when everything in it is kept
    role: str
    base: int  # the key of the message's own item
    items: list[int]
    parts: list[Part]
    unit: int
    group: bool  # one of an assistant tool call's messages: kept or dropped with the others
    tagged: bool  # x_context or inline tags were removed


@dataclass(slots=True)
class Layout:
    messages: list[MessageLayout]
    items: list[Item]
    units: list[list[int]]  # message indexes of each unit (a lone message, or a tool group)
    current_start: int  # index of the first message of the current turn
    problems: list[str] = field(default_factory=list)
    extra: dict[int, dict[str, Any]] = field(default_factory=dict)  # item key -> summary message
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)  # item key -> messages covered

    @property
    def tagged(self) -> bool:
        return any(m.tagged for m in self.messages)


@dataclass(slots=True)
class Decision:
    action: Action
    reason: str
    text: str | None = None  # the replacement text of a truncated or line-deduped item
    tokens: int = 0  # tokens after the decision
    anchor: int | None = None  # a placed summary: the message index it goes before

    @property
    def kept(self) -> bool:
        return self.action in (Action.KEEP, Action.TRUNCATE, Action.SUMMARY_INSERTED) or (
            self.action is Action.DEDUPE and self.text is not None
        )
