"""What may be decided about an item: keep, cut, drop, dedupe, summarize, clear; and why."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from proxy.planner.parts.recall_ids import LONGEST_ID
from proxy.types import Priority

# Appended to every truncated item (the cut must be visible), with the recall id of what
# was cut: MARKER, then `, recall <id>]`.
MARKER = "\n[…truncated"


def cut_marker(recall: str) -> str:
    return f"{MARKER}, recall {recall}]"


LONGEST_MARKER = cut_marker(LONGEST_ID)  # what a cut marker costs at most


class Action(str, Enum):
    KEEP = "keep"
    TRUNCATE = "truncate"
    DROP = "drop"
    DEDUPE = "dedupe"
    SUMMARIZE = "summarize"  # dropped, and a summary of its cluster took its place
    SUMMARY_INSERTED = "summary-inserted"
    CLEAR = "clear"  # an old tool result's content replaced by a placeholder, its call kept
    COMPACT = "compact"  # an old JSON tool result sent as the same JSON without spaces


# Why an item was dropped for want of room, by its priority (both planning paths say it).
OVER_BUDGET = {p: f"over budget ({p.value} priority)" for p in Priority}

_KEPT = (Action.KEEP, Action.TRUNCATE, Action.SUMMARY_INSERTED, Action.CLEAR, Action.COMPACT)


@dataclass(slots=True)
class Decision:
    action: Action
    reason: str
    text: str | None = None  # the replacement text of a truncated or line-deduped item
    tokens: int = 0  # tokens after the decision
    anchor: int | None = None  # a placed summary: the message index it goes before

    @property
    def kept(self) -> bool:
        return self.action in _KEPT or (self.action is Action.DEDUPE and self.text is not None)
