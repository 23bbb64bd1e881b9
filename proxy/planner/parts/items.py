"""The items a request's messages are cut into, as the layout's columns, and the tags they carry."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from proxy.planner.parts.recall_ids import recall_id
from proxy.types import Priority, Section


class Kind(str, Enum):
    MESSAGE = "message"  # a whole message's own text (or its text outside blocks)
    BLOCK = "block"  # an inline <context> block
    HEADING = "heading"  # a markdown-heading section of a system message
    OPAQUE = "opaque"  # a message of an unknown shape: forwarded untouched
    SUMMARY = "summary"  # a proxy-made summary (summaries.py), not in the request


@dataclass(slots=True)
class Item:
    """One item as a record: a view of the layout's columns (the report and tests read it)."""

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


class Tag:
    """A resolved tag: section, priority and the optional fields of x_context or a block."""

    __slots__ = ("cluster", "id", "priority", "score", "section", "source", "summary_of")

    def __init__(self, section: Section, priority: Priority, source: str) -> None:
        self.section, self.priority, self.source = section, priority, source
        self.id: str | None = None
        self.cluster: str | None = None
        self.score: float | None = None
        self.summary_of: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Fields:
    """An item's optional tag fields; only items with one set have them (most have none)."""

    id: str | None = None
    cluster: str | None = None
    score: float | None = None
    summary_of: tuple[str, ...] = ()


NO_FIELDS = Fields()


@dataclass(slots=True)
class Part:
    """Where a message's text lives: its string content (`index` None) or one text part."""

    index: int | None
    pieces: list[tuple[int, str]]  # (item key, text), in order; their join is the forwarded text


@dataclass(slots=True)
class Split:
    """A message that is more than one string item: its items (its own first) and parts."""

    items: list[int]
    parts: list[Part]
    tagged: bool  # x_context or inline tags were removed


@dataclass(slots=True)
class MessageLayout:
    """One message as a record: a view of the layout's columns (trim and tests read it)."""

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
    """A request's messages and items as parallel lists (columns), fast for long histories.

    Message i: `stripped[i]` (as forwarded when all of it is kept), its own item
    `base[i]`, and in `split` only when it holds more than its own item or its text is not
    one string. Item k: `msg[k]`, `role[k]`, ... `cost[k]`; its optional tag fields in
    `fields` only when it has any. A message of one string item has item key == its own.
    """

    stripped: list[Any]
    roles: list[str]  # each message's role
    base: list[int]
    split: dict[int, Split]
    units: Sequence[list[int]]  # message indexes of each unit (a lone message, or a tool group)
    unit_of: list[int]
    current_start: int  # index of the first message of the current turn
    msg: list[int]
    role: list[str]
    kind: list[Kind]
    section: list[Section]
    priority: list[Priority]
    text: list[str]
    tag: list[str]
    plain: list[bool]
    cost: list[int]
    fields: dict[int, Fields] = field(default_factory=dict)
    originals: Sequence[Any] = ()  # the request's messages, as they came
    problems: list[str] = field(default_factory=list)
    extra: dict[int, dict[str, Any]] = field(default_factory=dict)  # item key -> summary message
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)  # item key -> messages covered
    # Agent history: messages of older tool exchanges after the last user message (after
    # `current_start`, yet not the current turn).
    agent: frozenset[int] = frozenset()
    # The setup: messages before the first assistant message (none when there is none),
    # what the request is for (instructions, an environment, the task): kept whole.
    setup_end: int = 0
    # A text agent's commands (steps.py): its assistant message's index -> the command.
    commands: dict[int, str] = field(default_factory=dict)

    def add_item(self, i: int, role: str, kind: Kind, tag: Tag, text: str, plain: bool) -> int:
        """A new item of message i, tagged `tag`; its key. (Its cost is the caller's.)"""
        key = len(self.msg)
        self.msg.append(i)
        self.role.append(role)
        self.kind.append(kind)
        self.section.append(tag.section)
        self.priority.append(tag.priority)
        self.text.append(text)
        self.tag.append(tag.source)
        self.plain.append(plain)
        if tag.id is not None or tag.cluster is not None or tag.score is not None or tag.summary_of:
            self.fields[key] = Fields(tag.id, tag.cluster, tag.score, tag.summary_of)
        return key

    def recall_id(self, kind: str, i: int) -> str:
        """The recall id of what starts at message i (recall_ids.py), as the client sent it."""
        return recall_id(kind, self.recall_source(i))

    def recall_source(self, i: int) -> Any:
        """Message i as the client sent it: what its recall ids are made from."""
        return self.originals[i] if self.originals else self.stripped[i]

    def in_current(self, i: int) -> bool:
        """Message i is part of the current turn."""
        return i >= self.current_start and i not in self.agent

    @property
    def tagged(self) -> bool:
        return any(s.tagged for s in self.split.values())

    def group(self, i: int) -> bool:
        """Message i is one of a tool group's messages."""
        return len(self.units[self.unit_of[i]]) > 1

    def items_of(self, i: int) -> list[int]:
        split = self.split.get(i)
        return split.items if split is not None else [self.base[i]]

    def parts_of(self, i: int) -> list[Part]:
        split = self.split.get(i)
        if split is not None:
            return split.parts
        key = self.base[i]
        content = self.stripped[i].get("content")
        return [Part(None, [(key, content)])] if isinstance(content, str) else []

    def message(self, i: int) -> MessageLayout:
        split = self.split.get(i)
        return MessageLayout(
            i,
            self.originals[i] if self.originals else self.stripped[i],
            self.stripped[i],
            self.roles[i],
            self.base[i],
            self.items_of(i),
            self.parts_of(i),
            self.unit_of[i],
            self.group(i),
            split.tagged if split is not None else False,
        )

    @property
    def messages(self) -> list[MessageLayout]:
        """Every message as a record (built on each call: for reports and tests)."""
        return [self.message(i) for i in range(len(self.stripped))]

    def fields_of(self, key: int) -> Fields:
        return self.fields.get(key, NO_FIELDS)

    def item(self, key: int) -> Item:
        f = self.fields.get(key, NO_FIELDS)
        return Item(
            key,
            self.msg[key],
            self.role[key],
            self.kind[key],
            self.section[key],
            self.priority[key],
            self.text[key],
            self.tag[key],
            f.id,
            f.cluster,
            f.score,
            f.summary_of,
            self.in_current(self.msg[key]) and self.kind[key] is not Kind.SUMMARY,
            self.plain[key],
            self.cost[key],
        )

    @property
    def items(self) -> list[Item]:
        """Every item as a record (built on each call: for reports and tests)."""
        return [self.item(k) for k in range(len(self.msg))]
