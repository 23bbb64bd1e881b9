"""Relevance: BM25 of older history against the current turn, terms kept across requests."""

from proxy.relevance.scoring import TermIndex, score_history

__all__ = [
    "TermIndex",
    "score_history",
]
