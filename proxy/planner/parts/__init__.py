"""Reading a request into parts: its messages cut into items (units, tool groups, sections,
tags and where they came from), the vocabulary of what may be decided about each, and the
run's record. Decided here: which section and priority every part has, which messages are
the current turn, which tool exchanges are an agent's history."""

from proxy.planner.parts.costs import count_message, measure, overhead, untagged_counts
from proxy.planner.parts.decision import (
    LONGEST_MARKER,
    OVER_BUDGET,
    Action,
    Decision,
    cut_marker,
)
from proxy.planner.parts.groups import role_of, shape
from proxy.planner.parts.items import Kind, Layout
from proxy.planner.parts.memo import Head, Kept, PlanMemo, head_key
from proxy.planner.parts.messages import command_text, render, tool_name
from proxy.planner.parts.recall_ids import (
    DIGEST_CHARS,
    LONGEST_ID,
    MESSAGE,
    REPLY,
    STRETCH,
    message_digest,
    recall_id,
)
from proxy.planner.parts.recall_ids import KINDS as RECALL_KINDS
from proxy.planner.parts.run import Counted, Run, max_output, start_run
from proxy.planner.parts.sections import build_layout
from proxy.planner.parts.summaries import SUMMARY_PREFIX, ExtraSummary, Offered, add_summaries
from proxy.planner.parts.tag_fields import section_policy
from proxy.planner.parts.turns import Turn, history_turns

__all__ = [
    "DIGEST_CHARS",
    "LONGEST_ID",
    "LONGEST_MARKER",
    "MESSAGE",
    "OVER_BUDGET",
    "RECALL_KINDS",
    "REPLY",
    "STRETCH",
    "SUMMARY_PREFIX",
    "Action",
    "Counted",
    "Decision",
    "ExtraSummary",
    "Head",
    "Kept",
    "Kind",
    "Layout",
    "Offered",
    "PlanMemo",
    "Run",
    "Turn",
    "add_summaries",
    "build_layout",
    "command_text",
    "count_message",
    "cut_marker",
    "head_key",
    "history_turns",
    "max_output",
    "measure",
    "message_digest",
    "overhead",
    "recall_id",
    "render",
    "role_of",
    "section_policy",
    "shape",
    "start_run",
    "tool_name",
    "untagged_counts",
]
