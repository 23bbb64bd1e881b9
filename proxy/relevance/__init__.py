"""Relevance: BM25 of older history against the current turn, terms kept across requests."""

from proxy.relevance.ids import ids_in
from proxy.relevance.scoring import TermIndex, score_history

__all__ = [
    "TermIndex",
    "ids_in",
    "score_history",
]
