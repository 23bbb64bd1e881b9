"""Relevance: score older history items against the current turn with BM25."""

from __future__ import annotations

import math
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence

K1 = 1.2
# Less length normalization than the textbook 0.75: in chat, the long turns are the ones
# that say something ("I bought a Prius last week, ..."), the short ones are "Thanks!".
B = 0.5
# Share of a turn's score given to the turns 1 to 5 places away. In a conversation the
# answer sits next to the question: "How did you get into painting?" is followed by
# "A friend got me into it", which shares no word with a later "How did Evan get into
# painting?"; and a topic runs on for a few turns. On LoCoMo at a 4k budget, spreading
# to 2 places lifts the evidence kept from 0.70 to 0.80, to 5 places by another point.
SPREAD = (0.5, 0.35, 0.25, 0.15, 0.1)
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

# Unicode letters and digits; underscores split words so `user_id` matches `user id`.
_WORD = re.compile(r"[^\W_]+")
# The same words for ASCII text, about a third faster: most chat text is ASCII.
_ASCII_WORD = re.compile(r"[a-z0-9]+")

# Common English function words: they match everywhere and would only add noise.
# Contraction fragments (`s`, `t`, `don`, `ll`...) are here because the tokenizer splits
# on apostrophes.
_STOPWORD_TEXT = """
    a about above after again against all am an and any are aren as at be because been
    before being below between both but by can cannot could couldn d did didn do does
    doesn doing don down during each few for from further had hadn has hasn have haven
    having he her here hers herself him himself his how i if in into is isn it its itself
    just ll m me more most mustn my myself no nor not now o of off on once only or other
    ought our ours ourselves out over own re s same shan she should shouldn so some such t
    than that the their theirs them themselves then there these they this those through to
    too under until up ve very was wasn we were weren what when where which while who whom
    why will with won would wouldn y you your yours yourself yourselves also yeah yes oh
    hey hi ok okay um uh really
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

# "Name: " or "First Last: " at the start of a message: up to three words and a colon.
_LABEL = re.compile(r"\s*([^\W\d_][\w'.-]*(?: [^\W\d_][\w'.-]*){0,2}):\s")

_DOUBLE_END = re.compile(r"([^aeiouslz])\1$")


def stem(word: str) -> str:
    """A light English suffix rule: plural, -ing, -ed, -ly and a final e share one stem."""
    w = word
    if len(w) <= 3 or not w.isalpha():
        return w  # short words, numbers and codes are matched as written
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith(("sses", "xes", "zes", "ches", "shes")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    for suffix in ("ingly", "edly", "ing", "ed", "ly"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)]
            # "running" -> "runn" -> "run"; "stopped" -> "stopp" -> "stop".
            w = _DOUBLE_END.sub(r"\1", w)
            break
    if w.endswith("y") and len(w) > 3:
        w = w[:-1] + "i"  # "happy"/"happiness"/"happier" share "happi"
    if w.endswith("e") and len(w) > 3:
        w = w[:-1]  # "hike"/"hiking"/"hiked" -> "hik"
    return w


def _words(lowered: str) -> list[str]:
    return (_ASCII_WORD if lowered.isascii() else _WORD).findall(lowered)


def terms(text: str) -> list[str]:
    """Normalized terms of `text`: lowercased words, stemmed, stopwords removed."""
    return [stem(w) for w in _words(text.lower()) if w not in STOPWORDS]


_Entry = tuple[dict[str, int], int, frozenset[str]]
_NO_LABEL: frozenset[str] = frozenset()


class TermIndex:
    """Word counts per document and a stem index, kept across requests.

    Clients resend the whole history every turn, so each turn's words are read once and
    the next request only looks up the query's stems: scoring 600 turns drops from tens of
    milliseconds to about one. Bounded: past `max_documents` the least recently used
    documents go, past `max_words` distinct words everything is forgotten and rebuilt.
    The lock makes it safe for plans that run in worker threads.
    """

    def __init__(self, max_documents: int = 100_000, max_words: int = 500_000) -> None:
        self._max_documents = max_documents
        self._max_words = max_words
        self._docs: OrderedDict[str, _Entry] = OrderedDict()
        self._vocab: set[str] = set()
        self._by_head: dict[str, list[str]] = {}  # first two letters -> words seen
        self._stems: dict[str, str] = {}
        self.lock = threading.Lock()

    def stats(self, doc: str) -> tuple[dict[str, int], int]:
        """(count of each non-stopword word, number of non-stopword words) of `doc`."""
        counts, length, _ = self.entry(doc)
        return counts, length

    def entry(self, doc: str) -> _Entry:
        """`stats(doc)` and the stems of its speaker label ("Evan: ..."; empty if none)."""
        hit = self._docs.get(doc)
        if hit is not None:
            self._docs.move_to_end(doc)
            return hit
        words = _words(doc.lower())
        counts = Counter(words)
        stop = sum(counts.pop(w) for w in STOPWORDS.intersection(counts))
        label = _LABEL.match(doc)
        speaker = frozenset(self.terms(label.group(1))) if label else _NO_LABEL
        entry = (dict(counts), len(words) - stop, speaker)
        if len(self._vocab) > self._max_words:
            self._docs.clear()
            self._vocab.clear()
            self._by_head.clear()
            self._stems.clear()
        new = counts.keys() - self._vocab
        if new:
            self._vocab.update(new)
            for w in new:
                self._by_head.setdefault(w[:2], []).append(w)
        self._docs[doc] = entry
        if len(self._docs) > self._max_documents:
            self._docs.popitem(last=False)
        return entry

    def words_for(self, query_terms: Iterable[str]) -> dict[str, str]:
        """Every known word whose stem is one of `query_terms`, mapped to that stem."""
        out: dict[str, str] = {}
        for t in query_terms:
            # A word's stem minus its last letter is a prefix of the word, and every stem
            # keeps the word's first two letters: only that bucket can hold matches.
            prefix = t[:-1] or t
            for w in self._by_head.get(t[:2], ()):
                if w.startswith(prefix) and self._stem(w) == t:
                    out[w] = t
        return out

    def terms(self, text: str) -> list[str]:
        """`terms(text)`, with each word's stem remembered."""
        return [self._stem(w) for w in _words(text.lower()) if w not in STOPWORDS]

    def _stem(self, word: str) -> str:
        found = self._stems.get(word)
        if found is None:
            found = self._stems[word] = stem(word)
        return found


def score_history(
    query: str,
    documents: Sequence[str],
    spread: Sequence[float] = SPREAD,
    context: str = "",
    context_weight: float = CONTEXT_WEIGHT,
    index: TermIndex | None = None,
    speaker: float = SPEAKER,
) -> list[float]:
    """Relevance of each document to `query`; one non-negative float per document.

    `query` is the current turn; `context` (optional) the newest turns, whose terms count
    `context_weight` as much, so that a terse "and what about the other one?" still finds
    its subject without recent chatter outweighing a specific question.

    `documents` are history items in conversation order. Each gets its BM25 score plus
    `spread[d-1]` times the BM25 score of each item `d` places away (`spread=()` gives
    plain BM25). The collection statistics (document frequency, average length) come from
    `documents` themselves, so a word in every turn (a speaker's name) weighs little and
    a rare word shared with the query weighs a lot. A document whose speaker label
    ("Name: ...") the query names is then multiplied by `1 + speaker` (`speaker=0.0` and
    `spread=()` give plain BM25). `index` carries the documents' words from one request to
    the next; without one a throwaway index is used.
    """
    n = len(documents)
    index = index or TermIndex()
    with index.lock:
        query_terms = (
            dict.fromkeys(index.terms(context), context_weight) if context_weight > 0 else {}
        )
        asked = index.terms(query)
        query_terms.update(dict.fromkeys(asked, 1.0))
        if n == 0 or not query_terms:
            return [0.0] * n
        stats = [index.entry(doc) for doc in documents]
        matching = index.words_for(query_terms)
    lengths = [length for _, length, _ in stats]
    hits: list[dict[str, int]] = []
    wanted = matching.keys()
    for counts, _, _ in stats:
        found: dict[str, int] = {}
        # The intersection runs in C over the smaller side: most turns share few words.
        for w in counts.keys() & wanted:
            t = matching[w]
            found[t] = found.get(t, 0) + counts[w]
        hits.append(found)
    avg = sum(lengths) / n or 1.0
    df: dict[str, int] = {}
    for found in hits:
        for t in found:
            df[t] = df.get(t, 0) + 1
    # The +1 inside the log keeps idf positive even for a term in every document; the
    # query term's weight is folded in.
    idf = {t: query_terms[t] * math.log(1.0 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
    scores: list[float] = []
    for found, length in zip(hits, lengths, strict=True):
        if not found:
            scores.append(0.0)
            continue
        norm = K1 * (1.0 - B + B * length / avg)
        scores.append(sum(idf[t] * tf * (K1 + 1.0) / (tf + norm) for t, tf in found.items()))
    out = _spread(scores, spread)
    named = set(asked)
    if speaker and named:
        for i, (_, _, label) in enumerate(stats):
            if label and not label.isdisjoint(named):
                out[i] *= 1.0 + speaker
    return out


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
