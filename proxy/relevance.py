"""Relevance: score older history items against the current turn with BM25."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from proxy.relevance_terms import STOPWORDS, Entry, TermIndex, stem, terms

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
    with index.lock:
        query_terms: dict[str, float] = {}
        if context_weight > 0:
            around = dict.fromkeys(index.terms(context))
            share = context_weight * min(1.0, CONTEXT_TERMS / (len(around) or 1))
            query_terms = dict.fromkeys(around, share)
        asked = index.terms(query)
        query_terms.update(dict.fromkeys(asked, 1.0))
        if n == 0 or not query_terms:
            return [0.0] * n
        stats = [index.entry(doc) for doc in documents]
        hits = _hits(stats, index.words_for(query_terms))
    lengths = [length for _, length, _ in stats]
    avg = sum(lengths) / n or 1.0
    scores = _bm25(hits, lengths, avg, _idf(hits, query_terms, n))
    if feedback > 0:
        with index.lock:
            extra = _feedback(stats, scores, query_terms, index, n)
        scores = [
            s + x
            for s, x in zip(scores, _bm25(extra[0], lengths, avg, extra[1], feedback), strict=True)
        ]
    out = _spread(scores, spread)
    named = set(asked)
    if speaker and named:
        for i, (_, _, label) in enumerate(stats):
            if label and not label.isdisjoint(named):
                out[i] *= 1.0 + speaker
    return out


def _hits(stats: Sequence[Entry], matching: dict[str, str]) -> list[dict[str, int]]:
    """Each document's count of each matched term."""
    hits: list[dict[str, int]] = []
    wanted = matching.keys()
    for counts, _, _ in stats:
        found: dict[str, int] = {}
        # The intersection runs in C over the smaller side: most turns share few words.
        for w in counts.keys() & wanted:
            t = matching[w]
            found[t] = found.get(t, 0) + counts[w]
        hits.append(found)
    return hits


def _idf(hits: Sequence[dict[str, int]], weights: dict[str, float], n: int) -> dict[str, float]:
    """Each matched term's idf times its query weight."""
    df: dict[str, int] = {}
    for found in hits:
        for t in found:
            df[t] = df.get(t, 0) + 1
    # The +1 inside the log keeps idf positive even for a term in every document.
    return {t: weights[t] * math.log(1.0 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}


def _bm25(
    hits: Sequence[dict[str, int]],
    lengths: Sequence[int],
    avg: float,
    idf: dict[str, float],
    weight: float = 1.0,
) -> list[float]:
    scores: list[float] = []
    for found, length in zip(hits, lengths, strict=True):
        if not found:
            scores.append(0.0)
            continue
        norm = K1 * (1.0 - B + B * length / avg)
        total = sum(idf[t] * tf * (K1 + 1.0) / (tf + norm) for t, tf in found.items())
        scores.append(weight * total)
    return scores


def _feedback(
    stats: Sequence[Entry],
    scores: Sequence[float],
    query_terms: dict[str, float],
    index: TermIndex,
    n: int,
) -> tuple[list[dict[str, int]], dict[str, float]]:
    """The feedback terms' hits in every document and their idf (see FEEDBACK_DOCS)."""
    best = sorted((i for i in range(n) if scores[i] > 0), key=lambda i: (-scores[i], -i))
    seen: dict[str, int] = {}
    for i in best[:FEEDBACK_DOCS]:
        for t in {index.term(w) for w in stats[i][0]}:
            if t not in query_terms:
                seen[t] = seen.get(t, 0) + 1
    candidates = {t: 1.0 for t, c in seen.items() if c >= 2}
    if not candidates:
        return [{} for _ in range(n)], {}
    hits = _hits(stats, index.words_for(candidates))
    idf = _idf(hits, candidates, n)
    chosen = set(sorted(idf, key=lambda t: (-seen[t] * idf[t], t))[:FEEDBACK_TERMS])
    return [{t: c for t, c in h.items() if t in chosen} for h in hits], idf


def _spread(scores: list[float], weights: Sequence[float]) -> list[float]:
    out = list(scores)
    for d, w in enumerate(weights, 1):
        if d >= len(scores):
            break
        # Item i gains w * scores[i - d] (the one before) and w * scores[i + d] (after).
        out[d:] = [o + w * x for o, x in zip(out[d:], scores, strict=False)]
        out[:-d] = [o + w * x for o, x in zip(out[:-d], scores[d:], strict=False)]
    return out


def expand_neighbors(chosen: Iterable[int], n: int, limit: int) -> set[int]:
    """`chosen` plus up to `n` indices on each side of every member, within [0, limit)."""
    out: set[int] = set()
    for i in chosen:
        out.update(range(max(0, i - n), min(limit, i + n + 1)))
    return out
