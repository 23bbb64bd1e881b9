"""Budgets and allocation: what each item costs, what each section is granted, which items
are kept, cut, cleared or dropped, and the plan tightened until the forwarded request fits.
Decided here: why a message was dropped or cut, which old tool results are cleared, and
what a request whose required parts alone overflow gets (a cut, or a refusal)."""

from proxy.planner.budget.allocation import Plan, Planner
from proxy.planner.budget.fit import Fit, count_forwarded, known_counts
from proxy.planner.budget.note import budget_note, note_cost
from proxy.planner.budget.pinned import RECENT_SHARE
from proxy.planner.budget.placeholders import turns_placeholder
from proxy.planner.budget.trim import with_note

__all__ = [
    "RECENT_SHARE",
    "Fit",
    "Plan",
    "Planner",
    "budget_note",
    "count_forwarded",
    "known_counts",
    "note_cost",
    "turns_placeholder",
    "with_note",
]
