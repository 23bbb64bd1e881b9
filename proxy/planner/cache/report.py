"""Cache report: the items of a message of the request as it came, for the reports of
requests cache mode planned in parts (agent.py: the boundary's plan, then the rest)."""

from __future__ import annotations

from proxy.planner.parts import Layout
from proxy.planner.report import ItemReport
from proxy.types import Section

_RECENT, _SYSTEM = Section.RECENT_MESSAGES.value, Section.SYSTEM_PROMPT.value
_SUMMARY = Section.CONVERSATION_SUMMARY.value
_SUMMARY_PRIORITY = "medium"  # the section's default (the planner's summaries say the same)


def message_items(
    layout: Layout, i: int, action: str, reason: str, *, kept: bool
) -> list[ItemReport]:
    """The report items of message i of the request as it came (its tags' ids and
    clusters with them, which the inclusion log reads), all kept or all gone."""
    fields = layout.fields
    out = []
    for k in layout.items_of(i):
        tag = fields.get(k)
        out.append(
            ItemReport(
                i,
                layout.kind[k].value,
                layout.role[k],
                layout.section[k].value,
                layout.priority[k].value,
                layout.tag[k],
                layout.cost[k],
                layout.cost[k] if kept else 0,
                action,
                reason,
                tag.id if tag is not None else None,
                tag.cluster if tag is not None else None,
            )
        )
    return out
