"""History: older units ranked by what the request is doing now (the newest user turn, an
agent's newest commands), repeats found, and cut-off turns recalled. Decided here: which
older turn or tool exchange is worth keeping first, and how clearly a turn asks for the
past."""

from proxy.planner.history.exchange_rank import agent_rank, agent_worth
from proxy.planner.history.order import keep_sequence, query_texts
from proxy.planner.history.recall import (
    RECALL_ROLE,
    exchange_lines,
    quote,
    recall_message,
    speaker_line,
)
from proxy.planner.history.repeats import Dedupe, dedupe, may_repeat
from proxy.planner.history.standout import (
    STATEMENT_WEIGHT,
    asks,
    carrying_on,
    recall_need,
    recall_size,
    without_own_label,
)

__all__ = [
    "RECALL_ROLE",
    "STATEMENT_WEIGHT",
    "Dedupe",
    "agent_rank",
    "agent_worth",
    "asks",
    "carrying_on",
    "dedupe",
    "exchange_lines",
    "keep_sequence",
    "may_repeat",
    "query_texts",
    "quote",
    "recall_message",
    "recall_need",
    "recall_size",
    "speaker_line",
    "without_own_label",
]
