"""Report options: the `report` command's arguments, `--by` keys and `--since`/`--until` times."""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta

GROUP_KEYS = ("team", "model", "day", "month", "kind", "status", "level", "policy", "api")
_RELATIVE = re.compile(r"^(\d+)([hdw])$")
_UNITS = {"h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, now: datetime | None = None) -> str:
    """`7d`, `12h`, `2w`, a date or an ISO time -> a UTC `YYYY-MM-DDTHH:MM:SS` to compare."""
    now = datetime.now(UTC) if now is None else now
    if m := _RELATIVE.match(text.strip()):
        when = now - timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    else:
        try:
            when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a date, time or 7d/12h/2w: {text!r}") from None
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    # The log writes UTC ISO times, which sort as text: no per-line date parsing needed.
    return when.strftime("%Y-%m-%dT%H:%M:%S")


def _by_list(text: str) -> list[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in keys if k not in GROUP_KEYS]
    if unknown or not keys:
        raise argparse.ArgumentTypeError(
            f"--by takes a comma-separated list of {', '.join(GROUP_KEYS)}; got {text!r}"
        )
    return keys


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """The `report` sub-command's arguments; `run(namespace)` executes it."""
    parser.add_argument(
        "usage_log",
        metavar="USAGE.jsonl",
        nargs="+",
        help="the proxy's usage logs: paths or globs ('logs/*.jsonl*'), .gz files too",
    )
    parser.add_argument(
        "--by", type=_by_list, default=["team"], help=f"group by ({', '.join(GROUP_KEYS)})"
    )
    parser.add_argument("--since", type=parse_since, help="from this UTC date/time, or 7d, 12h")
    parser.add_argument("--until", type=parse_since, help="before this UTC date/time, or 1d")
    parser.add_argument("--format", dest="fmt", choices=("table", "csv", "json"), default="table")
    parser.add_argument("--html", metavar="OUT.html", help="also write a dashboard page")
    parser.add_argument("--out", "-o", metavar="FILE", help="write the table here, not stdout")
    parser.add_argument(
        "--policies",
        metavar="DIR",
        help="the policy folder whose teams' thresholds the dashboard marks (default: "
        "$CONTEXT_PROXY_POLICIES, else ./policies when it exists; else 0.80/0.90)",
    )
