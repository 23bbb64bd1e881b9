"""The report: what planning hands the server (the outcome, its counts), the plan report per
section and item, and the refusal of a request that cannot fit."""

from proxy.planner.report.outcome import PlanOutcome, held_back, make_outcome, unplanned
from proxy.planner.report.plan_report import ItemReport, PlanReport, SectionReport, build_report
from proxy.planner.report.refusal import Refused, no_report

__all__ = [
    "ItemReport",
    "PlanOutcome",
    "PlanReport",
    "Refused",
    "SectionReport",
    "build_report",
    "held_back",
    "make_outcome",
    "no_report",
    "unplanned",
]
