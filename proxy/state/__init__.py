"""Replicas: quota counters and the summary cache shared through Redis."""

from proxy.state.replicas import SharedState

__all__ = [
    "SharedState",
]
