"""History: older units ranked by what the request is doing now (the newest user turn, an
agent's newest commands), repeats found, and cut-off turns recalled. Decided here: which
older turn or tool exchange is worth keeping first, and how clearly a turn asks for the
past."""

from proxy.planner.history.file_text import shows_file_text, whole_lines
from proxy.planner.history.order import now_of, query_texts
from proxy.planner.history.rank import Now, keep_order, keys_of, merits, per_token, worth
from proxy.planner.history.recall import (
    RECALL_ROLE,
    quote,
    recall_message,
    speaker_line,
)
from proxy.planner.history.repeats import Dedupe, dedupe, may_repeat
from proxy.planner.history.reuse import reused
from proxy.planner.history.standout import (
    STATEMENT_WEIGHT,
    asks,
    carrying_on,
    standouts,
    without_own_label,
)
from proxy.planner.history.trail import trail_weights, unit_act

__all__ = [
    "RECALL_ROLE",
    "STATEMENT_WEIGHT",
    "Dedupe",
    "Now",
    "asks",
    "carrying_on",
    "dedupe",
    "keep_order",
    "keys_of",
    "may_repeat",
    "merits",
    "now_of",
    "per_token",
    "query_texts",
    "quote",
    "recall_message",
    "reused",
    "shows_file_text",
    "speaker_line",
    "standouts",
    "trail_weights",
    "unit_act",
    "whole_lines",
    "without_own_label",
    "worth",
]
