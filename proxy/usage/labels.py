"""Metric vocabulary: histogram buckets, and label values bounded against client input."""

from __future__ import annotations

# Model names come from clients: only names the policy or litellm's map knows become
# labels (else "other"), at most this many per team and this long. ~80 series lines per
# model, so a team's models stay within ~300 KB of /metrics whatever clients send.
MAX_MODELS_PER_TEAM = 32
MAX_LABEL_CHARS = 128
OTHER = "other"

# fmt: off
LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
)
OVERHEAD_BUCKETS = (  # the proxy's own time is usually well under a millisecond
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
)
UTILIZATION_BUCKETS = (
    0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0, 1.1, 1.25, 1.5,
)

# The OpenAI resources a pass-through request can name; anything else is "other".
ROUTE_GROUPS = frozenset({
    "assistants", "audio", "batches", "chat", "completions", "embeddings", "files",
    "fine_tuning", "images", "models", "moderations", "realtime", "responses", "threads",
    "uploads", "vector_stores",
})
# fmt: on


def route_group(path: str) -> str:
    """The label for a pass-through path: `/v1/models/x` -> `models`, unknown -> `other`."""
    parts = [p for p in path.split("/") if p]
    if parts and parts[0] == "v1":
        parts = parts[1:]
    return parts[0] if parts and parts[0] in ROUTE_GROUPS else OTHER
