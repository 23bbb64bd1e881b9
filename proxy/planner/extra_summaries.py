"""Extra summaries: proxy-made summaries of message spans, offered to the planner as items."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxy.planner.items import Fields, Kind, Layout
from proxy.planner.tag_fields import section_policy
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
        key = len(layout.msg)
        layout.msg.append(s.start)
        layout.role.append("system")
        layout.kind.append(Kind.SUMMARY)
        layout.section.append(section)
        layout.priority.append(priority)
        layout.text.append(message["content"])
        layout.tag.append("proxy summary")
        layout.plain.append(True)
        layout.cost.append(tokenizer.count_message(message))
        if s.key:
            layout.fields[key] = Fields(id=s.key)
        layout.extra[key] = message
        layout.spans[key] = (s.start, s.end)
