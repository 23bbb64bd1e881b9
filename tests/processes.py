"""Starting the real `python -m proxy serve` command for tests that need a separate process."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def serve_command(
    port: int, policies: Path | str, upstream: str, usage_log: Path | str, *extra: str
) -> list[str]:
    return [
        sys.executable, "-m", "proxy", "serve", "--port", str(port), "--policies", str(policies),
        "--upstream", upstream, "--usage-log", str(usage_log), *extra,
    ]  # fmt: skip
