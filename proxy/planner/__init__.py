"""The pure planner: tagging, groups, budgets, dedupe, clusters, cutting. No I/O."""

from proxy.planner.groups import role_of, shape
from proxy.planner.refusal import Refused
from proxy.planner.report import ItemReport, PlanReport
from proxy.planner.request import ExtraSummary, PlanOutcome, plan_request, unplanned

__all__ = [
    "ExtraSummary",
    "ItemReport",
    "PlanOutcome",
    "PlanReport",
    "Refused",
    "plan_request",
    "role_of",
    "shape",
    "unplanned",
]
