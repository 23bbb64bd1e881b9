"""Relevance terms: words of a history item normalized for matching (stopwords, stems, aliases)."""

from __future__ import annotations

import re

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
