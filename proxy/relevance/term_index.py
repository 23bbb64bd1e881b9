"""Term index: each history item's terms as arrays of ids, kept across requests."""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

import numpy as np
from numpy.typing import NDArray

from proxy.relevance.ids import figures_in, ids_in
from proxy.relevance.string_sets import StringSets
from proxy.relevance.terms import STOPWORDS, term, words

# "Name: " or "First Last: " at the start of a message: up to three words and a colon.
_LABEL = re.compile(r"\s*([^\W\d_][\w'.-]*(?: [^\W\d_][\w'.-]*){0,2}):\s")

_NO_LABEL: frozenset[int] = frozenset()
W = TypeVar("W", str, bytes)
# The id every stopword counts as: counted, then set aside. Terms get ids from 1.
_STOP = 0
# Documents read together are joined into one text, with _END (a word of its own, that
# no document may hold) after each; its id marks where each document's words end.
_END = "\x00"
_END_ID = -1
_JOIN = f" {_END} "
_END_PIECE = _END.encode()
# Words are read from the UTF-8 bytes: every ASCII byte that is not a letter or digit
# becomes a space (and an uppercase letter, lowercase), and splitting the result gives the
# text's *pieces*, which are its words (`relevance_terms.words`) wherever it is ASCII, four
# times as fast as the regular expression. Text that is not all ASCII is lowercased first
# (str.lower has rules of its own); a piece with other characters ("café", "great🎉",
# "don’t") holds zero, one or more words, and is learnt as the one word it holds, or as
# _SPLIT if several.
_PIECE_BYTES = bytes(
    c + 32 if 65 <= c <= 90 else c if 48 <= c <= 57 or 97 <= c <= 122 or c >= 128 else 32
    for c in range(256)
)
# The same, keeping _END.
_PIECE_BYTES_END = _END_PIECE + _PIECE_BYTES[1:]
# The id of a piece that holds several words: its text is read with the regular expression.
_SPLIT = -2
READ_BATCH_CHARS = 256 * 1024  # of new documents read at once (_read_in_batches)


class DocTerms(NamedTuple):
    """One history item as relevance sees it."""

    # Its distinct terms (stopwords left out): rows of (TermIndex id, how often it occurs),
    # one array, so that a request's documents are joined in one step.
    pairs: NDArray[np.int32]
    length: int  # number of non-stopword words
    label: frozenset[int]  # the term ids of its speaker label ("Evan: ..."), if any

    @property
    def ids(self) -> NDArray[np.int32]:
        ids: NDArray[np.int32] = self.pairs[:, 0]
        return ids

    @property
    def tfs(self) -> NDArray[np.int32]:
        tfs: NDArray[np.int32] = self.pairs[:, 1]
        return tfs


class TermIndex:
    """Terms per document and a word -> term memo, kept across requests.

    Clients resend the whole history every turn, so each turn's words are read once and
    the next request only looks them up. Terms are numbered, and each document keeps its
    terms' ids and counts as arrays, so that scoring a request is a few array operations over
    all its documents at once. Bounded: past `max_documents` documents, or `max_bytes` of
    their arrays (a 600-turn chat takes under 1 MB), the least recently used go (and so
    in the memos of each text's ids and figures, string_sets.py, a quarter of it each);
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
        self._words: dict[str, int] = {}  # word -> term id, for text read by the regex
        self._pieces: dict[bytes, int] = {_END_PIECE: _END_ID}  # piece -> id (see _SPLIT)
        self._ids: dict[str, int] = {}  # term -> id
        self.names: list[str] = [""]  # id -> term
        self._slots: NDArray[np.int32] = np.zeros(1024, np.int32)
        # What ids_in and figures_in read in each text: at most max_documents entries and
        # a quarter of max_bytes each.
        self._id_sets = StringSets(ids_in, max_documents, max_bytes // 4)
        self._figure_sets = StringSets(figures_in, max_documents, max_bytes // 4)
        self.lock = threading.Lock()

    def ids(self, text: str) -> frozenset[str]:
        """The ids `text` holds (ids.py), read once and then remembered."""
        return self._id_sets.get(text)

    def figures(self, text: str) -> frozenset[str]:
        """The ids and numbers `text` holds (ids.py), read once and then remembered."""
        return self._figure_sets.get(text)

    def entry(self, doc: str) -> DocTerms:
        """The terms of `doc`, read once and then remembered."""
        return self.entries([doc])[0]

    def entries(self, documents: Sequence[str]) -> list[DocTerms]:
        """The terms of each document, read once and then remembered.

        On a chat's next turn every document but the newest is known: they are looked up
        in one lean loop. The new ones are read together, as one text: a first request
        brings hundreds, and a call per document would cost more than the reading.
        """
        # Keyed by the text's hash, as the token count cache is: holding every text would
        # double the index's memory (a collision, at ~n^2/2^65, only shifts one ranking).
        out: list[DocTerms | None] = []
        new: list[int] = []
        docs, found = self._docs, self._docs.get
        for doc in documents:
            key = hash(doc)
            hit = found(key)
            if hit is None:
                new.append(len(out))
            else:
                docs.move_to_end(key)
            out.append(hit)
        if new:
            read = self._read_in_batches([documents[i] for i in new])
            for i, entry in zip(new, read, strict=True):
                out[i] = entry
                key = hash(documents[i])
                if key not in docs:  # the same text twice in one request counts once
                    docs[key] = entry
                    self._bytes += _footprint(entry)
            while len(docs) > self._max_documents or self._bytes > self._max_bytes:
                self._bytes -= _footprint(docs.popitem(last=False)[1])
        return out  # type: ignore[return-value]  # every None was replaced

    def read(self, documents: Sequence[str]) -> None:
        """Reads `documents` ahead (a new history, while its tokens are counted): scoring
        then finds them known. Takes the lock."""
        with self.lock:
            self.begin()
            self.entries(documents)

    def counts(self, doc: str) -> dict[str, int]:
        """How often each term occurs in `doc` (for people and tests; scoring uses ids)."""
        return {self.names[i]: n for i, n in self.entry(doc).pairs.tolist()}

    def term_ids(self, text: str) -> list[int]:
        """The ids of the terms of `text`, in order, stopwords left out."""
        return list(filter(None, self._word_ids(text)))  # _STOP is 0

    def slots(self) -> NDArray[np.int32]:
        """Zeros, one per term id: scratch space for scoring, to be left as zeros (under
        the lock). One table for all requests, grown with the terms, saves a fill each time."""
        if len(self._slots) < len(self.names):
            self._slots = np.zeros(2 * len(self.names), np.int32)
        return self._slots

    def _read_in_batches(self, documents: list[str]) -> list[DocTerms]:
        """`_read`, READ_BATCH_CHARS of text at a time: its splits and lookups are single C
        calls that hold the GIL throughout (30 MB read at once held the event loop ~1 s
        from a worker thread); between batches the event loop gets its turn."""
        out: list[DocTerms] = []
        batch: list[str] = []
        size = 0
        for doc in documents:
            if batch and size + len(doc) > READ_BATCH_CHARS:
                out += self._read(batch)
                batch, size = [], 0
            batch.append(doc)
            size += len(doc)
        if batch:
            out += self._read(batch)
        return out

    def _read(self, documents: list[str]) -> list[DocTerms]:
        """The entries of documents not seen before, their words split and looked up as
        one text, and counted (per document and term) in one sort."""
        joined = _JOIN.join(map(_lowered, documents)) + _JOIN
        if joined.count(_END) != len(documents):  # a document holds _END itself: one by one
            return [self._read_one(doc) for doc in documents]
        found = joined.encode("utf-8", "surrogatepass").translate(_PIECE_BYTES_END).split()
        word_ids = np.array(self._piece_ids(found), np.int32)
        ends = word_ids == _END_ID
        kept = word_ids > 0  # neither stopwords, ends, nor pieces of several words
        doc = np.cumsum(ends)[kept]  # each kept word's document (ends before it)
        pairs, tfs = np.unique(doc * len(self.names) + word_ids[kept], return_counts=True)
        docs, ids = np.divmod(pairs, len(self.names))
        both = np.stack([ids, tfs], axis=1).astype(np.int32)
        bounds = np.searchsorted(docs, np.arange(len(documents) + 1)).tolist()
        lengths = np.bincount(doc, minlength=len(documents)).tolist()
        out = [
            DocTerms(both[start:stop].copy(), length, self._label(text))  # a copy frees the rest
            for text, start, stop, length in zip(
                documents, bounds, bounds[1:], lengths, strict=False
            )
        ]
        split = np.flatnonzero(word_ids == _SPLIT)
        if len(split):  # the documents with a piece of several words: one by one
            for i in set(np.searchsorted(np.flatnonzero(ends), split).tolist()):
                out[i] = self._read_one(documents[i])
        return out

    def _read_one(self, doc: str) -> DocTerms:
        ids, tfs = np.unique(np.array(self.term_ids(doc), np.int32), return_counts=True)
        pairs = np.stack([ids, tfs], axis=1).astype(np.int32)
        return DocTerms(pairs, int(tfs.sum()), self._label(doc))

    def _label(self, doc: str) -> frozenset[int]:
        """The term ids of `doc`'s speaker label, if it starts with one."""
        label = _LABEL.match(doc) if ":" in doc else None  # the scan is cheaper than the match
        return frozenset(self.term_ids(label.group(1))) if label else _NO_LABEL

    def _word_ids(self, text: str) -> list[int]:
        """The term id of each word of `text` (_STOP for a stopword), in order."""
        lowered = _lowered(text)
        ids = self._piece_ids(
            lowered.encode("utf-8", "surrogatepass").translate(_PIECE_BYTES).split()
        )
        if _SPLIT in ids:
            return self._regex_ids(text.lower())
        return ids

    def _piece_ids(self, pieces: list[bytes]) -> list[int]:
        """The id of each piece (see _SPLIT), through the memo, which learns those it lacks."""
        return _looked_up(pieces, self._pieces, self._piece_id)

    def _piece_id(self, piece: bytes) -> int:
        """The id of a piece not seen before."""
        text = piece.decode("utf-8", "surrogatepass")
        if text.isascii():
            return self._term_id(text)
        held = words(text)
        if len(held) == 1:
            return self._term_id(held[0])
        return _SPLIT if held else _STOP  # none: like a stopword, it is not counted

    def _regex_ids(self, lowered: str) -> list[int]:
        """`_word_ids` of text with a piece of several words, read by the regular expression."""
        return _looked_up(words(lowered), self._words, self._term_id)

    def _term_id(self, word: str) -> int:
        """The id of the term a lowercased word counts as; _STOP for a stopword."""
        if word in STOPWORDS:
            return _STOP
        t = term(word)
        i = self._ids.get(t)
        if i is None:
            i = self._ids[t] = len(self.names)
            self.names.append(t)
        return i

    def begin(self) -> None:
        """Called (under the lock) before a request takes any id: past `max_words` the
        index starts over then, never in the middle of a request, whose ids must agree."""
        if len(self._words) + len(self._pieces) + len(self.names) > self._max_words:
            self._forget()

    def _forget(self) -> None:
        """Start over: the documents' arrays hold ids that are about to be reused (the
        memos of each text's ids and figures hold strings, not these ids: they stay)."""
        self._docs.clear()
        self._bytes = 0
        del self.names[1:]
        for memo in (self._words, self._pieces, self._ids):
            memo.clear()
        self._pieces[_END_PIECE] = _END_ID


def _looked_up(found: list[W], memo: dict[W, int], learn: Callable[[W], int]) -> list[int]:
    """The ids of `found` through `memo`, which learns (by `learn`) those it lacks."""
    # The lookups run in C; most are known already, so the unknown ones are looked for
    # only when there is one.
    try:
        return list(map(memo.__getitem__, found))
    except KeyError:
        for w in set(found).difference(memo):
            memo[w] = learn(w)
        return list(map(memo.__getitem__, found))


def _lowered(text: str) -> str:
    """`text`, lowercased unless it is all ASCII (the byte table lowercases that)."""
    return text if text.isascii() else text.lower()


def _footprint(entry: DocTerms) -> int:
    """About what a document costs the index: its arrays and the objects around them."""
    return entry.pairs.nbytes + 400
