"""Relevance terms: words of a history item normalized for matching (stopwords, stems, aliases)."""

from __future__ import annotations

import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable

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

# (count of each non-stopword word, number of non-stopword words, speaker label terms).
Entry = tuple[dict[str, int], int, frozenset[str]]
_NO_LABEL: frozenset[str] = frozenset()


class TermIndex:
    """Word counts per document and a term index, kept across requests.

    Clients resend the whole history every turn, so each turn's words are read once and
    the next request only looks up the query's terms: scoring 600 turns drops from tens of
    milliseconds to about one. Bounded: past `max_documents` the least recently used
    documents go, past `max_words` distinct words everything is forgotten and rebuilt.
    The lock makes it safe for plans that run in worker threads.
    """

    def __init__(self, max_documents: int = 100_000, max_words: int = 500_000) -> None:
        self._max_documents = max_documents
        self._max_words = max_words
        self._docs: OrderedDict[str, Entry] = OrderedDict()
        self._vocab: set[str] = set()
        self._by_head: dict[str, list[str]] = {}  # first two letters -> words seen
        self._terms: dict[str, str] = {}
        self.lock = threading.Lock()

    def stats(self, doc: str) -> tuple[dict[str, int], int]:
        """(count of each non-stopword word, number of non-stopword words) of `doc`."""
        counts, length, _ = self.entry(doc)
        return counts, length

    def entry(self, doc: str) -> Entry:
        """`stats(doc)` and the terms of its speaker label ("Evan: ..."; empty if none)."""
        hit = self._docs.get(doc)
        if hit is not None:
            self._docs.move_to_end(doc)
            return hit
        found = words(doc.lower())
        counts = Counter(found)
        stop = sum(counts.pop(w) for w in STOPWORDS.intersection(counts))
        label = _LABEL.match(doc)
        speaker = frozenset(self.terms(label.group(1))) if label else _NO_LABEL
        entry = (dict(counts), len(found) - stop, speaker)
        if len(self._vocab) > self._max_words:
            self._docs.clear()
            self._vocab.clear()
            self._by_head.clear()
            self._terms.clear()
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
        """Every known word whose term is one of `query_terms`, mapped to that term."""
        out: dict[str, str] = {}
        for t in query_terms:
            for s in VARIANTS.get(t, (t,)):
                # A word's stem minus its last letter is a prefix of the word, and every
                # stem keeps the word's first two letters: only that bucket can hold matches.
                prefix = s[:-1] or s
                for w in self._by_head.get(s[:2], ()):
                    if w.startswith(prefix) and self.term(w) == t:
                        out[w] = t
        return out

    def terms(self, text: str) -> list[str]:
        """`terms(text)`, with each word's term remembered."""
        return [self.term(w) for w in words(text.lower()) if w not in STOPWORDS]

    def term(self, word: str) -> str:
        """`term(word)`, remembered."""
        found = self._terms.get(word)
        if found is None:
            found = self._terms[word] = term(word)
        return found
