"""Extra summaries: proxy-made summaries of message spans, offered to the planner as items."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from proxy.planner.parts.items import Kind, Layout, Tag
from proxy.planner.parts.tag_fields import section_policy
from proxy.policy import Policy
from proxy.types import Section, Tokenizer

SUMMARY_PREFIX = "[Summary of earlier conversation]\n"


@dataclass(frozen=True, slots=True)
class ExtraSummary:
    """A proxy-made summary of messages[start:end], offered in place of what it covers."""

    start: int
    end: int
    text: str
    key: str = ""  # the summary cache's key, echoed in the report's reason


@dataclass(frozen=True, slots=True)
class Offered:
    """What a caller offers a plan besides the body: proxy-made summaries of spans of it,
    and the tokens it will add to the request if the plan trims it (the recall tool's
    declaration): a trimmed request fits in that much less than its budget."""

    summaries: Sequence[ExtraSummary] = ()
    reserve: int | Callable[[], int] = 0  # a callable: asked only if the plan trims


def add_summaries(
    layout: Layout, extra: Sequence[ExtraSummary], tokenizer: Tokenizer, policy: Policy
) -> None:
    """Proxy-made summaries become optional items standing in for the spans they cover."""
    if not extra:
        return
    section = Section.CONVERSATION_SUMMARY
    priority = section_policy(policy, section).priority
    for s in extra:
        if not (0 <= s.start < s.end <= layout.current_start) or not s.text:
            continue
        message = {"role": "system", "content": SUMMARY_PREFIX + s.text}
        tag = Tag(section, priority, "proxy summary")
        tag.id = s.key or None
        key = layout.add_item(s.start, "system", Kind.SUMMARY, tag, message["content"], True)
        layout.cost.append(tokenizer.count_message(message))
        layout.extra[key] = message
        layout.spans[key] = (s.start, s.end)
