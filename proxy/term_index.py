"""Term index: each history item's terms as arrays of ids, kept across requests."""

from __future__ import annotations

import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from itertools import chain
from typing import NamedTuple, TypeVar

import numpy as np
from numpy.typing import NDArray

from proxy.relevance_terms import STOPWORDS, term, words

# "Name: " or "First Last: " at the start of a message: up to three words and a colon.
_LABEL = re.compile(r"\s*([^\W\d_][\w'.-]*(?: [^\W\d_][\w'.-]*){0,2}):\s")

_NO_LABEL: frozenset[int] = frozenset()
W = TypeVar("W", str, bytes)
# The id every stopword counts as: counted, then set aside. Terms get ids from 1.
_STOP = 0
# Every byte that is not an ASCII lowercase letter or digit becomes a space: splitting the
# result gives exactly `_ASCII_WORD.findall`, about twice as fast.
_ASCII_SPACES = bytes(c if 48 <= c <= 57 or 97 <= c <= 122 else 32 for c in range(256))


class DocTerms(NamedTuple):
    """One history item as relevance sees it."""

    ids: NDArray[np.int64]  # its distinct terms, as TermIndex ids
    tfs: NDArray[np.int64]  # how often each occurs
    length: int  # number of non-stopword words
    label: frozenset[int]  # the term ids of its speaker label ("Evan: ..."), if any


class TermIndex:
    """Terms per document and a word -> term memo, kept across requests.

    Clients resend the whole history every turn, so each turn's words are read once and
    the next request only looks them up. Terms are numbered, and each document keeps its
    term ids and counts as arrays, so that scoring a request is a few array operations over
    all its documents at once. Bounded: past `max_documents` documents, or `max_bytes` of
    their arrays (a 600-turn chat takes under 1 MB), the least recently used go;
    past `max_words` distinct words and terms everything starts over, between requests.
    The lock makes it safe for plans that run in worker threads.
    """

    def __init__(
        self,
        max_documents: int = 100_000,
        max_words: int = 100_000,
        max_bytes: int = 32 * 2**20,
    ) -> None:
        self._max_documents = max_documents
        self._max_words = max_words
        self._max_bytes = max_bytes
        self._bytes = 0
        self._docs: OrderedDict[int, DocTerms] = OrderedDict()
        self._words: dict[str, int] = {}  # word -> term id, _STOP for a stopword
        self._ascii_words: dict[bytes, int] = {}  # the same for ASCII words, as bytes
        self._ids: dict[str, int] = {}  # term -> id
        self.names: list[str] = [""]  # id -> term
        self._slots: NDArray[np.int32] = np.zeros(1024, np.int32)
        self.lock = threading.Lock()

    def entry(self, doc: str) -> DocTerms:
        """The terms of `doc`, read once and then remembered."""
        # Keyed by the text's hash, as the token count cache is: holding every text would
        # double the index's memory (a collision, at ~n^2/2^65, only shifts one ranking).
        key = hash(doc)
        hit = self._docs.get(key)
        if hit is not None:
            self._docs.move_to_end(key)
            return hit
        ids = self._word_ids(doc)
        counts = Counter(ids)
        length = len(ids) - counts.pop(_STOP, 0)
        label = _LABEL.match(doc) if ":" in doc else None  # the scan is cheaper than the match
        speaker = frozenset(self.term_ids(label.group(1))) if label else _NO_LABEL
        size = len(counts)
        # Ids then counts in one array (one conversion instead of two), seen as two views.
        both = np.fromiter(chain(counts.keys(), counts.values()), np.int64, 2 * size)
        entry = DocTerms(both[:size], both[size:], length, speaker)
        self._docs[key] = entry
        self._bytes += _footprint(entry)
        while len(self._docs) > self._max_documents or self._bytes > self._max_bytes:
            self._bytes -= _footprint(self._docs.popitem(last=False)[1])
        return entry

    def entries(self, documents: Sequence[str]) -> list[DocTerms]:
        """`entry` of each document; the known ones (every one but the newest, on a chat's
        next turn) looked up in one lean loop."""
        out: list[DocTerms] = []
        docs, found = self._docs, self._docs.get
        for doc in documents:
            key = hash(doc)
            hit = found(key)
            if hit is None:
                hit = self.entry(doc)
            else:
                docs.move_to_end(key)
            out.append(hit)
        return out

    def counts(self, doc: str) -> dict[str, int]:
        """How often each term occurs in `doc` (for people and tests; scoring uses ids)."""
        entry = self.entry(doc)
        return {self.names[i]: int(c) for i, c in zip(entry.ids, entry.tfs, strict=True)}

    def terms(self, text: str) -> list[str]:
        """`terms(text)`, with each word's term remembered."""
        return [self.names[i] for i in self.term_ids(text)]

    def term_ids(self, text: str) -> list[int]:
        """The ids of the terms of `text`, in order, stopwords left out."""
        return list(filter(None, self._word_ids(text)))  # _STOP is 0

    def slots(self) -> NDArray[np.int32]:
        """Zeros, one per term id: scratch space for scoring, to be left as zeros (under
        the lock). One table for all requests, grown with the terms, saves a fill each time."""
        if len(self._slots) < len(self.names):
            self._slots = np.zeros(2 * len(self.names), np.int32)
        return self._slots

    def _word_ids(self, text: str) -> list[int]:
        """The term id of each word of `text` (_STOP for a stopword), in order."""
        lowered = text.lower()
        if lowered.isascii():
            return self._looked_up(
                lowered.encode().translate(_ASCII_SPACES).split(), self._ascii_words, bytes.decode
            )
        return self._looked_up(words(lowered), self._words, str)

    def _looked_up(
        self, found: list[W], memo: dict[W, int], as_text: Callable[[W], str]
    ) -> list[int]:
        """The ids of the words `found` through `memo`, which learns the words it lacks."""
        # The lookups run in C; most words are known already, so the unknown ones are
        # looked for only when there is one.
        try:
            return list(map(memo.__getitem__, found))
        except KeyError:
            for w in set(found).difference(memo):
                memo[w] = self._learn(as_text(w))
            return list(map(memo.__getitem__, found))

    def _learn(self, word: str) -> int:
        """The id of a word not in the memo it is being learnt for (the other may have it)."""
        known = self._words.get(word)
        if known is not None:
            return known
        if word in STOPWORDS:
            self._words[word] = _STOP
            return _STOP
        t = term(word)
        i = self._ids.get(t)
        if i is None:
            i = self._ids[t] = len(self.names)
            self.names.append(t)
        self._words[word] = i
        return i

    def begin(self) -> None:
        """Called (under the lock) before a request takes any id: past `max_words` the
        index starts over then, never in the middle of a request, whose ids must agree."""
        if len(self._words) + len(self._ascii_words) + len(self.names) > self._max_words:
            self._forget()

    def _forget(self) -> None:
        """Start over: the documents' arrays hold ids that are about to be reused."""
        self._docs.clear()
        self._bytes = 0
        self._words.clear()
        self._ascii_words.clear()
        self._ids.clear()
        del self.names[1:]


def _footprint(entry: DocTerms) -> int:
    """About what a document costs the index: its arrays and the objects around them."""
    return 2 * entry.ids.nbytes + 400
