"""The `report` command: totals from the usage log, table/CSV/JSON, the HTML dashboard."""

from proxy.report.totals import add_report_arguments, run

__all__ = [
    "add_report_arguments",
    "run",
]
