"""Relevance terms: words of a history item normalized for matching (stopwords, stems, aliases)."""

from __future__ import annotations

import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from itertools import chain
from typing import NamedTuple, TypeVar

import numpy as np
from numpy.typing import NDArray

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

# Words a suffix rule cannot join, first word of each line the one they count as:
# irregular verbs ("what did she buy?" / "I bought it"), British and American spellings,
# and everyday family words. Only plain English that any chat uses; no topic synonyms,
# which would join words that mean different things in code or in other domains.
_ALIAS_TEXT = """
    buy bought
    go went gone
    break broke broken
    eat ate eaten
    see saw seen
    take took taken
    give gave given
    get got gotten
    find found
    tell told
    say said
    think thought
    bring brought
    teach taught
    catch caught
    fight fought
    lose lost
    meet met
    write wrote written
    drive drove driven
    ride rode ridden
    begin began begun
    sing sang sung
    swim swam swum
    run ran
    feel felt
    keep kept
    sleep slept
    build built
    send sent
    spend spent
    hold held
    fall fell fallen
    grow grew grown
    know knew known
    throw threw thrown
    fly flew flown
    draw drew drawn
    choose chose chosen
    speak spoke spoken
    wear wore worn
    mother mom mum mommy
    father dad daddy
    child children kid
    favorite favourite fave
    color colour
    travel travelled traveled trip
    marry married wedding
    job career
    photo picture pic
    movie film
"""

# The last letters of every suffix stem() removes or rewrites: s, ed, ing, ly, y, e.
_STEM_ENDS = frozenset("sdgye")
_DOUBLE_END = re.compile(r"([^aeiouslz])\1$")


def stem(word: str) -> str:
    """A light English suffix rule: plural, -ing, -ed, -ly and a final e share one stem."""
    w = word
    if len(w) <= 3 or w[-1] not in _STEM_ENDS or not w.isalpha():
        # Short words, numbers and codes are matched as written; so is a word whose last
        # letter no rule below looks at (the common case, checked first).
        return w
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


def _alias_table() -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    canonical: dict[str, str] = {}
    variants: dict[str, tuple[str, ...]] = {}
    for line in _ALIAS_TEXT.strip().splitlines():
        stems = list(dict.fromkeys(stem(w) for w in line.split()))
        for s in stems[1:]:
            canonical[s] = stems[0]
        variants[stems[0]] = tuple(stems)
    return canonical, variants


# Stem -> the stem it counts as; canonical stem -> every stem that counts as it (itself first).
ALIAS, VARIANTS = _alias_table()


def term(word: str) -> str:
    """The term a lowercased non-stopword word counts as: its stem, or that stem's alias."""
    s = stem(word)
    return ALIAS.get(s, s)


def words(lowered: str) -> list[str]:
    """The words of lowercased text, stopwords included."""
    return (_ASCII_WORD if lowered.isascii() else _WORD).findall(lowered)


def terms(text: str) -> list[str]:
    """Normalized terms of `text`: lowercased words, stemmed and aliased, stopwords removed."""
    return [term(w) for w in words(text.lower()) if w not in STOPWORDS]


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
        lowered = doc.lower()
        if lowered.isascii():
            ascii_words = lowered.encode().translate(_ASCII_SPACES).split()
            counts = self._counted(ascii_words, self._ascii_words, bytes.decode)
            n_words = len(ascii_words)
        else:
            found = _WORD.findall(lowered)
            counts = self._counted(found, self._words, str)
            n_words = len(found)
        length = n_words - counts.pop(_STOP, 0)
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
        lowered = text.lower()
        if lowered.isascii():
            ascii_words = lowered.encode().translate(_ASCII_SPACES).split()
            self._learn_all(ascii_words, self._ascii_words, bytes.decode)
            return list(filter(None, map(self._ascii_words.__getitem__, ascii_words)))
        found = _WORD.findall(lowered)
        self._learn_all(found, self._words, str)
        return list(filter(None, map(self._words.__getitem__, found)))

    def slots(self) -> NDArray[np.int32]:
        """Zeros, one per term id: scratch space for scoring, to be left as zeros (under
        the lock). One table for all requests, grown with the terms, saves a fill each time."""
        if len(self._slots) < len(self.names):
            self._slots = np.zeros(2 * len(self.names), np.int32)
        return self._slots

    def _counted(
        self, found: list[W], memo: dict[W, int], as_text: Callable[[W], str]
    ) -> Counter[int]:
        """Count of each term id (and of _STOP) among the words `found`."""
        # The lookups and the counting run in C; most words are known already, so they
        # are looked for only when one is not.
        try:
            return Counter(map(memo.__getitem__, found))
        except KeyError:
            self._learn_all(found, memo, as_text)
            return Counter(map(memo.__getitem__, found))

    def _learn_all(self, found: list[W], memo: dict[W, int], as_text: Callable[[W], str]) -> None:
        """Put the words of `found` that `memo` lacks in it: only those are stemmed."""
        for w in set(found).difference(memo):
            memo[w] = self._learn(as_text(w))

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
