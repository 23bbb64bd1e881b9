"""Summaries of dropped history: spans, the store, the off-path summarizer."""

from proxy.summaries.calls import SummaryTarget
from proxy.summaries.store import SummaryStore, open_store
from proxy.summaries.summarizer import Lookup, Summarizer

__all__ = [
    "Lookup",
    "Summarizer",
    "SummaryStore",
    "SummaryTarget",
    "open_store",
]
