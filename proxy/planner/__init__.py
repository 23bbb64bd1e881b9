"""The pure planner: a request in, the request to forward and a report out. No I/O.

Its rooms, each importing only those before it: `parts` (a request read into tagged
items), `history` (older units ranked by what the request is doing now), `budget` (costs,
grants, cuts, fitting), `report` (the outcome and the plan report), `cache` (cuts in steps
for the provider's prompt cache); `request.plan_request` takes a request through them.
"""

from proxy.planner.history import quote
from proxy.planner.parts import (
    DIGEST_CHARS,
    RECALL_KINDS,
    Kept,
    PlanMemo,
    max_output,
    message_digest,
    role_of,
    shape,
    tool_name,
)
from proxy.planner.report import ItemReport, PlanOutcome, PlanReport, Refused, unplanned
from proxy.planner.request import ExtraSummary, Offered, plan_request

__all__ = [
    "DIGEST_CHARS",
    "RECALL_KINDS",
    "ExtraSummary",
    "ItemReport",
    "Kept",
    "Offered",
    "PlanMemo",
    "PlanOutcome",
    "PlanReport",
    "Refused",
    "max_output",
    "message_digest",
    "plan_request",
    "quote",
    "role_of",
    "shape",
    "tool_name",
    "unplanned",
]
