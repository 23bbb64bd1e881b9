"""Commands (serve, plan, check, report): the only place that reads argv and prints."""

from proxy.cli.main import main

__all__ = [
    "main",
]
