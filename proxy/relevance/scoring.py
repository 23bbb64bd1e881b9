"""Relevance: score older history items against the current turn with BM25."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple, cast

import numpy as np
from numpy.typing import NDArray

from proxy.relevance.term_index import DocTerms, TermIndex
from proxy.relevance.terms import STOPWORDS, stem, terms

__all__ = ["STOPWORDS", "TermIndex", "expand_neighbors", "score_history", "stem", "terms"]

K1 = 1.2
# Less length normalization than the textbook 0.75: in chat the long turns are the ones
# that say something ("I bought a Prius last week, ..."), the short ones are "Thanks!".
B = 0.5
# Share of a turn's score given to the turns 1 to 6 places away. In a conversation the
# answer sits next to the question: "How did you get into painting?" is followed by
# "A friend got me into it", which shares no word with a later "How did Evan get into
# painting?"; and a topic runs on for a few turns. On LoCoMo at a 4k budget, spreading
# to 2 places lifts the evidence kept from 0.70 to 0.80, to 6 places by another point.
SPREAD = (0.6, 0.45, 0.3, 0.2, 0.15, 0.1)
# A turn labelled with a speaker ("Evan: ...", how group chats and transcripts are sent)
# whom the current turn names scores (1 + SPEAKER) times as much, after the spread: "what
# car does Evan drive?" is answered by Evan's "my new Prius broke down", which shares no
# word with it, next to Sam's "a new car breaking down is such a hassle". Multiplying
# keeps an unrelated turn at zero; on LoCoMo at 4k it adds about 3 points.
SPEAKER = 2.0
# Weight of a term that is only in the `context` (the newest turns), not in the query.
# Full weight would let the chatter of the last few turns drown the question: on LoCoMo,
# adding the six newest turns to the query at full weight halves the evidence kept.
CONTEXT_WEIGHT = 0.05
# Past this many distinct context terms they share CONTEXT_TERMS * CONTEXT_WEIGHT: a long
# recent exchange would otherwise outweigh a short question by its length alone.
CONTEXT_TERMS = 10
# Pseudo-relevance feedback: the terms found in at least two of the FEEDBACK_DOCS best
# turns, the FEEDBACK_TERMS rarest of them, join the query at FEEDBACK_WEIGHT. "What car
# does Evan drive?" finds "a new car breaking down" and "my Prius"; "prius" then finds
# the turns that only say "the Prius". Read from the index's counts: no text is re-read.
FEEDBACK_DOCS = 5
FEEDBACK_TERMS = 10
FEEDBACK_WEIGHT = 0.3


def score_history(
    query: str,
    documents: Sequence[str],
    spread: Sequence[float] = SPREAD,
    context: str = "",
    context_weight: float = CONTEXT_WEIGHT,
    index: TermIndex | None = None,
    speaker: float = SPEAKER,
    feedback: float = FEEDBACK_WEIGHT,
) -> list[float]:
    """Relevance of each document to `query`; one non-negative float per document.

    `query` is the current turn; `context` (optional) the newest turns, whose terms count
    `context_weight` as much (shared by them past CONTEXT_TERMS distinct terms), so that a
    terse "and what about the other one?" still finds its subject without recent chatter
    outweighing a specific question.

    `documents` are history items in conversation order. Each gets its BM25 score (with
    the `feedback` terms of the best ones added to the query), plus `spread[d-1]` times
    the score of each item `d` places away; a document whose speaker label ("Name: ...")
    the query names is then multiplied by `1 + speaker`. `spread=()`, `speaker=0.0` and
    `feedback=0.0` give plain BM25. The collection statistics (document frequency, average
    length) come from `documents` themselves, so a word in every turn weighs little and a
    rare word shared with the query weighs a lot. `index` carries the documents' words
    from one request to the next; without one a throwaway index is used.
    """
    n = len(documents)
    index = index or TermIndex()
    # Held throughout: the ids and names read here are only stable under the lock.
    with index.lock:
        index.begin()
        query_terms: dict[int, float] = {}
        if context_weight > 0:
            around = dict.fromkeys(index.term_ids(context))
            share = context_weight * min(1.0, CONTEXT_TERMS / (len(around) or 1))
            query_terms = dict.fromkeys(around, share)
        asked = index.term_ids(query)
        query_terms.update(dict.fromkeys(asked, 1.0))
        if n == 0 or not query_terms:
            return [0.0] * n
        docs = index.entries(documents)
        found = Collection(docs, index.slots())
        scores = found.bm25(query_terms)
        if feedback > 0:
            extra = _feedback(found, scores, query_terms, index.names)
            if extra is not None:
                scores += feedback * extra
    out = _spread(scores, spread)
    named = set(asked)
    if speaker and named:
        for i, doc in enumerate(docs):
            if doc.label and not doc.label.isdisjoint(named):
                out[i] *= 1.0 + speaker
    return cast(list[float], out.tolist())


class Collection:
    """A request's history items as flat arrays: every (document, term) pair once."""

    def __init__(self, docs: Sequence[DocTerms], slots: NDArray[np.int32]) -> None:
        self.docs = docs
        self.n = n = len(docs)
        pairs, words, _ = zip(*docs, strict=True) if docs else ((), (), ())
        both = np.concatenate(pairs) if pairs else np.zeros((0, 2), np.int32)
        self.ids: NDArray[np.int32] = np.ascontiguousarray(both[:, 0])
        self.tfs: NDArray[np.int32] = both[:, 1]
        self.doc = np.repeat(np.arange(n), np.fromiter(map(len, pairs), np.intp, n))
        lengths = np.array(words, np.float64)
        avg = float(lengths.sum()) / max(n, 1) or 1.0
        # K1 * (1 - B + B * length / avg): BM25's length normalization of each document.
        self.norms = K1 * (1.0 - B) + (K1 * B / avg) * lengths
        self._slots = slots

    def find(self, terms: NDArray[np.int32]) -> Match:
        """How often each of `terms` occurs in each document, and in how many documents."""
        k = len(terms)
        # A table over all term ids (zero everywhere but here) answers for every word at
        # once, by one gather: no sort, no search.
        self._slots[terms] = np.arange(1, k + 1, dtype=np.int32)
        place = self._slots[self.ids]
        self._slots[terms] = 0
        at = np.flatnonzero(place != 0)  # (six times faster than on the integers)
        # Each hit's cell in a (document, term) table, numbered row by row and put in that
        # order (a document's pairs come by term id): the sums below add in it, and so
        # give the same floats whatever ids the terms have.
        cells, tfs = self.doc[at] * k + (place[at] - 1), self.tfs[at]
        if self.n * k <= _DENSE * len(cells):  # most cells hit: a table orders them for free
            table = np.zeros(self.n * k, np.int32)
            table[cells] = tfs
            cells = np.flatnonzero(table != 0)
            tfs = table[cells]
        else:
            order = np.argsort(cells)
            cells, tfs = cells[order], tfs[order]
        docs, where = np.divmod(cells, k)
        return Match(docs, where, tfs, np.bincount(where, minlength=k))

    def idf(self, match: Match) -> NDArray[np.float64]:
        """BM25's idf of each term of `match`."""
        df = match.df
        # The +1 inside the log keeps idf positive even for a term in every document.
        return cast(NDArray[np.float64], np.log1p((self.n - df + 0.5) / (df + 0.5)))

    def bm25(self, weights: dict[int, float]) -> NDArray[np.float64]:
        """Every document's BM25 for the terms `weights` (term id: weight)."""
        k = len(weights)
        match = self.find(np.fromiter(weights.keys(), np.int32, k))
        w = np.fromiter(weights.values(), np.float64, k)
        return self.sum(match, (K1 + 1.0) * w * self.idf(match))

    def sum(self, match: Match, factor: NDArray[np.float64]) -> NDArray[np.float64]:
        """Every document's sum of factor * tf / (tf + norm) over its terms in `match`."""
        tf = match.tfs.astype(np.float64)
        gains = factor[match.where] * tf / (tf + self.norms[match.docs])
        # bincount adds in array order: the same total on every run and every replica. (With
        # no cell at all it answers integers, hence the cast.)
        totals = np.bincount(match.docs, weights=gains, minlength=self.n)
        return totals.astype(np.float64, copy=False)

    def without(self, ids: NDArray[np.int32], terms: NDArray[np.int32]) -> NDArray[np.int32]:
        """`ids` less those in `terms` (the table again: cheaper than np.isin's sort)."""
        self._slots[terms] = 1
        keep = self._slots[ids] == 0
        self._slots[terms] = 0
        return cast(NDArray[np.int32], ids[keep])


# `find` puts the cells in order through a table over all of them while they are at most
# this many per hit (a few terms, many words: tool output, code), else by sorting the hits.
_DENSE = 16


class Match(NamedTuple):
    """The (document, term) cells where terms occur, row by row."""

    docs: NDArray[np.intp]  # each cell's document
    where: NDArray[np.intp]  # its term's place among the terms looked for
    tfs: NDArray[np.int32]  # how often the term occurs in that document
    df: NDArray[np.intp]  # per term, how many documents have it

    def columns(self, chosen: Sequence[int]) -> Match:
        """The match of the terms at places `chosen` alone, in that order: what `find`
        would answer for them, without reading the documents again."""
        place = np.full(len(self.df), -1, np.intp)
        place[chosen] = np.arange(len(chosen))
        where = place[self.where]
        keep = where >= 0
        docs, where, tfs = self.docs[keep], where[keep], self.tfs[keep]
        order = np.argsort(docs * len(chosen) + where, kind="stable")  # row by row again
        return Match(docs[order], where[order], tfs[order], self.df[chosen])


def _feedback(
    found: Collection, scores: NDArray[np.float64], query: dict[int, float], names: list[str]
) -> NDArray[np.float64] | None:
    """The feedback terms' BM25 (see FEEDBACK_DOCS), before FEEDBACK_WEIGHT; None if none."""
    scored = np.flatnonzero(scores > 0)
    # Best first; among equals, the newer first.
    best = scored[np.lexsort((-scored, -scores[scored]))][:FEEDBACK_DOCS]
    if len(best) == 0:
        return None
    pool = np.concatenate([found.docs[i].ids for i in best])
    pool = found.without(pool, np.fromiter(query, np.int32, len(query)))
    candidates, seen = np.unique(pool, return_counts=True)
    common = seen >= 2
    candidates, seen = candidates[common], seen[common]
    if len(candidates) == 0:
        return None
    match = found.find(candidates)
    idf = found.idf(match)
    rank = seen * idf
    order = sorted(range(len(candidates)), key=lambda k: (-rank[k], names[candidates[k]]))
    chosen = order[:FEEDBACK_TERMS]
    # In the chosen order, which the ids do not set: the sums add in it.
    return found.sum(match.columns(chosen), (K1 + 1.0) * idf[chosen])


def _spread(scores: NDArray[np.float64], weights: Sequence[float]) -> NDArray[np.float64]:
    out = scores.copy()
    for d, w in enumerate(weights, 1):
        if d >= len(scores):
            break
        # Item i gains w * scores[i - d] (the one before) and w * scores[i + d] (after).
        out[d:] += w * scores[:-d]
        out[:-d] += w * scores[d:]
    return out


def expand_neighbors(chosen: Iterable[int], n: int, limit: int) -> set[int]:
    """`chosen` plus up to `n` indices on each side of every member, within [0, limit)."""
    out: set[int] = set()
    for i in chosen:
        out.update(range(max(0, i - n), min(limit, i + n + 1)))
    return out
