"""The pure planner: a request in, the request to forward and a report out. No I/O.

Its rooms, each importing only those before it: `parts` (a request read into tagged
items), `history` (older units ranked by what the request is doing now), `budget` (costs,
grants, cuts, fitting), `report` (the outcome and the plan report), `cache` (cuts in steps
for the provider's prompt cache); `request.plan_request` takes a request through them.
"""

from proxy.planner.parts import Kept, PlanMemo, role_of, shape
from proxy.planner.report import ItemReport, PlanOutcome, PlanReport, Refused, unplanned
from proxy.planner.request import ExtraSummary, plan_request

__all__ = [
    "ExtraSummary",
    "ItemReport",
    "Kept",
    "PlanMemo",
    "PlanOutcome",
    "PlanReport",
    "Refused",
    "plan_request",
    "role_of",
    "shape",
    "unplanned",
]
