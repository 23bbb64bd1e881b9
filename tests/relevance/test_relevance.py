"""Tests for relevance: BM25 scoring of older history against the current turn."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.relevance import scoring as relevance
from proxy.relevance.scoring import (
    CONTEXT_TERMS,
    K1,
    STOPWORDS,
    B,
    Collection,
    TermIndex,
    expand_neighbors,
    score_history,
    stem,
    terms,
)
from proxy.relevance.term_index import _footprint

HISTORY = [
    "Caroline: I went to the LGBTQ support group yesterday, it was powerful.",
    "Melanie: That sounds great! How are the kids?",
    "Caroline: They are fine, we baked cookies together.",
    "Melanie: I painted a sunset over the lake last weekend.",
    "Caroline: My flight number is 4471 and it leaves at noon.",
    "Melanie: Jon told me about his new bakery in Paris.",
    "Caroline: I am researching adoption agencies now.",
    "Melanie: We went camping at the beach with the family.",
]


def best(query: str, docs: list[str] = HISTORY) -> int:
    scores = score_history(query, docs)
    return max(range(len(docs)), key=lambda i: (scores[i], -i))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("When did Caroline go to the LGBTQ support group?", 0),  # old turn, rare terms
        ("What did Melanie paint recently?", 3),  # painted -> paint
        ("Which agencies is Caroline researching?", 6),  # agencies -> agency, -ing
        ("What is the flight number? 4471", 4),  # numbers match as written
        ("Where is Jon's bakery?", 5),  # names match
        ("Did they bake any cookie?", 2),  # baked/cookies -> bake/cookie
        ("Has Melanie gone camping?", 7),
    ],
)
def test_query_ranks_its_turn_first(query: str, expected: int) -> None:
    assert best(query) == expected


@pytest.mark.parametrize(
    ("words", "same"),
    [
        (("paint", "paints", "painted", "painting"), True),
        (("hike", "hiking", "hiked", "hikes"), True),
        (("run", "running", "runs"), True),
        (("stop", "stopped", "stopping"), True),
        (("party", "parties"), True),
        (("box", "boxes"), True),
        (("class", "classes"), True),
        (("agency", "agencies"), True),
        (("bus", "buses"), True),
        (("paint", "pain"), False),
        (("2022", "2023"), False),
    ],
)
def test_stem(words: tuple[str, ...], same: bool) -> None:
    assert (len({stem(w) for w in words}) == 1) is same


def test_short_words_and_numbers_kept_as_written() -> None:
    assert stem("gas") == "gas"
    assert stem("1990s") == "1990s"
    assert terms("The 7 dogs of Ann") == ["7", "dog", "ann"]


def test_stopwords_do_not_score() -> None:
    assert score_history("what is the and of it", HISTORY) == [0.0] * len(HISTORY)
    assert "the" in STOPWORDS and "caroline" not in STOPWORDS


def test_unrelated_docs_score_zero() -> None:
    scores = score_history("LGBTQ", HISTORY, spread=())
    assert scores[0] > 0
    assert all(s == 0.0 for s in scores[1:])


def test_spread_lifts_neighbours_of_a_match() -> None:
    docs = ["a", "How did you get into painting?", "A friend showed me.", "b", "c", "d"]
    q = "How did Evan get into painting?"
    plain = score_history(q, docs, spread=(), feedback=0.0)
    spread = score_history(q, docs, spread=(0.5, 0.25), feedback=0.0)
    assert plain[2] == 0.0  # the answer shares no term with the question
    assert spread[2] == pytest.approx(0.5 * plain[1] + plain[2])
    assert spread[0] == pytest.approx(0.5 * plain[1])
    assert spread[3] == pytest.approx(0.25 * plain[1])
    assert spread[4] == spread[5] == 0.0
    assert spread[1] == pytest.approx(plain[1])  # its neighbours had no score of their own


def test_rare_term_outweighs_common_term() -> None:
    # "caroline" is in half the turns, "adoption" in one: the rare term wins.
    docs = ["Caroline: hello there", "Caroline: hello again", "Melanie: adoption", "Bob: x"]
    scores = score_history("caroline adoption", docs, spread=(), speaker=0.0)
    assert scores[2] > scores[0] > 0


def test_term_frequency_saturates() -> None:
    docs = ["cat", "cat cat", "cat cat cat cat cat cat cat cat", "dog"]
    s = score_history("cat", docs, spread=())
    assert s[0] < s[1] < s[2]
    assert s[2] < 2 * s[1]  # k1 bounds the gain from repetition


def test_longer_doc_scores_lower_for_one_hit() -> None:
    docs = ["lake", "lake house garden fence window door roof chimney", "dog"]
    s = score_history("lake", docs, spread=())
    assert s[0] > s[1] > 0


def test_unicode_words() -> None:
    docs = ["Straße in München", "Café au lait", "東京 trip"]
    assert best("münchen", docs) == 0
    assert best("café", docs) == 1
    assert best("東京", docs) == 2


def test_empty_inputs() -> None:
    assert score_history("anything", []) == []
    assert score_history("", HISTORY) == [0.0] * len(HISTORY)
    assert score_history("cookies", [""] * 8 + ["cookies"])[:1] == [0.0]
    assert score_history("cookies", [""]) == [0.0]


def test_deterministic() -> None:
    q = "Caroline support group adoption"
    assert score_history(q, HISTORY) == score_history(q, list(HISTORY))


def test_context_terms_count_less_than_the_query() -> None:
    # The question names adoption; the newest turns talk about the lake.
    scores = score_history("What about adoption?", HISTORY, spread=(), context="the lake")
    assert scores[6] > scores[3] > 0


def test_context_alone_finds_the_subject_of_a_terse_turn() -> None:
    assert set(score_history("and what about that?", HISTORY)) == {0.0}  # nothing to go on
    scores = score_history("and what about that?", HISTORY, context="Melanie: the sunset!")
    assert max(range(len(HISTORY)), key=scores.__getitem__) == 3


def test_context_weight_zero_ignores_context() -> None:
    plain = score_history("adoption", HISTORY)
    assert score_history("adoption", HISTORY, context="lake", context_weight=0.0) == plain


def test_expand_neighbors() -> None:
    assert expand_neighbors({0, 5}, 1, 6) == {0, 1, 4, 5}
    assert expand_neighbors({3}, 0, 6) == {3}
    assert expand_neighbors({3}, 2, 10) == {1, 2, 3, 4, 5}
    assert expand_neighbors(set(), 3, 10) == set()


def reference_bm25(
    query: str, docs: list[str], context: str = "", weight: float = 0.0
) -> list[float]:
    """The textbook formula, word by word, with no shortcuts; the context's terms share
    `CONTEXT_TERMS * weight` once there are more of them."""
    around = set(terms(context))
    weight *= min(1.0, CONTEXT_TERMS / (len(around) or 1))
    q = {t: weight for t in around} | {t: 1.0 for t in terms(query)}
    toks = [terms(d) for d in docs]
    n = len(docs)
    if n == 0:
        return []
    avg = sum(map(len, toks)) / n or 1.0
    df = Counter(t for tk in toks for t in set(tk))
    out = []
    for tk in toks:
        tf = Counter(tk)
        s = 0.0
        for t, w in q.items():
            if tf[t]:
                idf = w * math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                s += idf * tf[t] * (K1 + 1) / (tf[t] + K1 * (1 - B + B * len(tk) / avg))
        out.append(s)
    return out


VOCAB = (
    "the a cat cats running runs ran studies study Paris paris 42 4471 hiking hike café "
    "flies fly supplies supply happily happy boxes go_to x y ß ÉTÉ"
)
WORDS = st.sampled_from(VOCAB.split())
TEXT = st.lists(WORDS, max_size=12).map(" ".join)
DOCS = st.lists(TEXT, max_size=12)


@given(TEXT, DOCS)
def test_scores_nonnegative_and_aligned(query: str, docs: list[str]) -> None:
    scores = score_history(query, docs)
    assert len(scores) == len(docs)
    assert all(s >= 0.0 and math.isfinite(s) for s in scores)


@given(TEXT, TEXT, DOCS, st.floats(0, 1))
def test_context_matches_reference(query: str, context: str, docs: list[str], w: float) -> None:
    got = score_history(query, docs, spread=(), context=context, context_weight=w, feedback=0)
    assert got == pytest.approx(reference_bm25(query, docs, context, w))


def reference_spread(scores: list[float], weights: tuple[float, ...]) -> list[float]:
    n = len(scores)
    return [
        scores[i]
        + sum(w * scores[j] for d, w in enumerate(weights, 1) for j in (i - d, i + d) if 0 <= j < n)
        for i in range(n)
    ]


@given(TEXT, DOCS)
def test_matches_reference_formula(query: str, docs: list[str]) -> None:
    got = score_history(query, docs, spread=(), feedback=0.0)
    assert got == pytest.approx(reference_bm25(query, docs))


@given(TEXT, DOCS, st.lists(st.floats(0, 1), max_size=3).map(tuple))
def test_spread_matches_reference(query: str, docs: list[str], w: tuple[float, ...]) -> None:
    expected = reference_spread(reference_bm25(query, docs), w)
    assert score_history(query, docs, spread=w, feedback=0.0) == pytest.approx(expected)


@given(TEXT, DOCS, st.randoms(use_true_random=False))
def test_permutation_consistent(query: str, docs: list[str], rnd: object) -> None:
    # Plain BM25 does not depend on order (spread does, by design; so does feedback, whose
    # best turns break ties by position).
    order = list(range(len(docs)))
    rnd.shuffle(order)  # type: ignore[attr-defined]
    scores = score_history(query, docs, spread=(), feedback=0.0)
    shuffled = score_history(query, [docs[i] for i in order], spread=(), feedback=0.0)
    assert shuffled == pytest.approx([scores[i] for i in order])


@given(st.text(max_size=20))
def test_stem_minus_last_letter_is_a_prefix(word: str) -> None:
    # score_history relies on this to stem only candidate words.
    w = word.lower()
    assert w.startswith(stem(w)[:-1])


@pytest.mark.parametrize(
    ("words", "same"),
    [
        (("buy", "bought", "buying"), True),
        (("go", "went", "gone"), True),
        (("mom", "mother", "mum", "moms"), True),
        (("kids", "children", "child"), True),
        (("favorite", "favourite", "favorites"), True),
        (("wedding", "married", "marry"), True),
        (("buy", "go"), False),
        (("won", "win"), False),  # "won" is a contraction fragment (won't): a stopword
    ],
)
def test_aliases_share_a_term(words: tuple[str, ...], same: bool) -> None:
    assert (len({tuple(terms(w)) for w in words}) == 1) is same


def test_alias_matches_in_scoring_and_index() -> None:
    docs = ["Tom: I bought a new bike", "Ann: my mum called", "Tom: nice weather"]
    assert best("What did Tom buy?", docs) == 0
    assert best("How is her mother?", docs) == 1
    index = TermIndex()
    assert index.counts(docs[0]) == {"tom": 1, "buy": 1, "new": 1, "bik": 1}


def test_speaker_named_by_the_query_is_boosted() -> None:
    docs = ["Evan: I love my new Prius", "Sam: a new car is great", "Evan: hello", "Sam: bye"]
    plain = score_history("What car does Evan drive?", docs, spread=(), feedback=0.0, speaker=0)
    boosted = score_history("What car does Evan drive?", docs, spread=(), feedback=0.0)
    assert boosted[0] == pytest.approx(3.0 * plain[0])  # Evan's turns: times 1 + SPEAKER
    assert boosted[2] == pytest.approx(3.0 * plain[2])
    assert boosted[1] == pytest.approx(plain[1]) and boosted[3] == plain[3] == 0.0
    # Only a speaker the query names; a label alone does nothing.
    assert score_history("car", docs, spread=(), feedback=0.0)[0] == 0.0


def test_speaker_label_shapes() -> None:
    index = TermIndex()

    def label(doc: str) -> set[str]:
        return {index.names[i] for i in index.entry(doc).label}

    assert label("Mary Ann Lee: hi there") == set(terms("Mary Ann Lee"))
    assert label("Zoë: bonjour") == {"zoë"}
    assert label("no label here") == set()
    assert label("one two three four: too many words") == set()
    assert label("see http://x.y: not a label") == set()


def test_feedback_finds_a_turn_through_the_best_turns_words() -> None:
    # "prius" is in two of the turns that mention the car; the last turn only says Prius.
    docs = [
        "my car is a prius",
        "the car, a prius, broke down",
        "weather talk",
        "more weather talk",
        "other news entirely",
        "sold the prius yesterday",
    ]
    plain = score_history("what car", docs, spread=(), feedback=0.0)
    fed = score_history("what car", docs, spread=())
    assert plain[5] == 0.0 < fed[5]
    assert fed[2] == fed[3] == fed[4] == 0.0  # nothing shared with the best turns
    assert min(fed[0], fed[1]) > fed[5]  # the query's own matches stay first


def test_long_context_shares_a_fixed_weight() -> None:
    # Twice the context terms: each counts half as much, so the total stays the same.
    docs = ["alpha beta", "gamma delta"] + [f"pad{i}" for i in range(6)]
    short = " ".join(f"c{i}" for i in range(CONTEXT_TERMS - 1)) + " alpha"
    long = " ".join(f"c{i}" for i in range(2 * CONTEXT_TERMS - 1)) + " alpha"
    s1 = score_history("zzz", docs, spread=(), context=short, feedback=0.0)
    s2 = score_history("zzz", docs, spread=(), context=long, feedback=0.0)
    assert s2[0] == pytest.approx(s1[0] / 2) and s1[0] > 0


@given(TEXT, DOCS)
def test_features_keep_zero_and_alignment(query: str, docs: list[str]) -> None:
    # Feedback and the speaker boost never score a turn with nothing in common with the
    # query nor with the turns it matches.
    labelled = [f"Paris: {d}" for d in docs]
    full = score_history(query, labelled, spread=())
    plain = score_history(query, labelled, spread=(), feedback=0.0, speaker=0.0)
    assert len(full) == len(labelled)
    assert all(f >= p - 1e-9 and math.isfinite(f) for f, p in zip(full, plain, strict=True))
    if not any(plain):
        assert not any(full)


@given(TEXT, TEXT, DOCS, DOCS)
def test_same_scores_whatever_the_index_has_seen(
    query: str, context: str, docs: list[str], before: list[str]
) -> None:
    # A warm index numbers terms differently from a fresh one (other requests came first);
    # the scores must be the very same floats, so that replicas and restarts agree.
    warm = TermIndex()
    score_history(context + " " + query, before, context=query, index=warm)
    fresh = score_history(query, docs, context=context, index=TermIndex())
    assert score_history(query, docs, context=context, index=warm) == fresh
    assert score_history(query, docs, context=context, index=warm) == fresh  # cached now


def test_forgetting_everything_changes_nothing() -> None:
    small = TermIndex(max_words=40)
    first = [score_history("adoption lake painting", HISTORY, index=small) for _ in range(3)]
    assert first[0] == first[1] == first[2] == score_history("adoption lake painting", HISTORY)
    assert len(small.names) <= 40 + 60  # it started over instead of growing without end


def test_documents_are_bounded_least_recently_used_first() -> None:
    index = TermIndex(max_documents=3)
    for doc in ("one cat", "two dogs", "three birds", "one cat", "four fish"):
        index.entry(doc)
    assert list(index._docs) == [hash(d) for d in ("three birds", "one cat", "four fish")]


def test_scratch_table_left_clean() -> None:
    index = TermIndex()
    score_history("adoption lake painting", HISTORY, context="the sunset", index=index)
    assert not index.slots().any()


def test_documents_are_bounded_by_size() -> None:
    index = TermIndex(max_bytes=10_000)
    docs = [f"turn {i} " + " ".join(f"w{i}x{k}" for k in range(100)) for i in range(40)]
    for doc in docs:
        index.entry(doc)
    kept = list(index._docs)
    assert 0 < len(kept) < 40 and kept == [hash(d) for d in docs[-len(kept) :]]  # newest stay
    assert score_history("turn", docs, index=index) == score_history("turn", docs)


ODD_TEXT = st.text(max_size=60) | st.sampled_from(
    ["a\x00b c", "Σ ΣΑΣ σ ΑΣ'Α", "İstanbul KELVIN", "", "don’t Stop", "great🎉 CAFÉ —", "\ud800x"]
)


@given(st.lists(ODD_TEXT | TEXT, max_size=10), st.lists(ODD_TEXT | TEXT, max_size=4))
def test_documents_read_together_as_one_by_one(docs: list[str], before: list[str]) -> None:
    # New documents are read as one joined text, split as bytes; each must get exactly the
    # terms it gets alone (NUL bytes, Unicode case rules, pieces of several words such as
    # "don’t", duplicates and known documents included).
    together = TermIndex()
    together.entries(before)
    read = together.entries(before[:1] + docs + docs[:2])
    alone = TermIndex()
    for doc, entry in zip(before[:1] + docs + docs[:2], read, strict=True):
        one = alone.entry(doc)
        mine = dict(zip([together.names[i] for i in entry.ids], entry.tfs.tolist(), strict=True))
        assert mine == {alone.names[i]: n for i, n in zip(one.ids, one.tfs.tolist(), strict=True)}
        assert mine == Counter(terms(doc)) and entry.length == len(terms(doc))
        assert {together.names[i] for i in entry.label} == {alone.names[i] for i in one.label}
    # Each distinct text is held, and counted, once.
    assert together._bytes == sum(map(_footprint, together._docs.values()))


@given(DOCS, TEXT, st.data())
def test_columns_of_a_match_are_a_match_of_those_terms(
    docs: list[str], text: str, data: st.DataObject
) -> None:
    # Feedback takes its chosen terms' cells from the candidates' match instead of reading
    # the documents again: the very same cells, in the same order, as a match of those.
    index = TermIndex()
    found = Collection(index.entries(docs), index.slots())
    terms = np.array(list(dict.fromkeys(index.term_ids(text))), np.int32)
    chosen = data.draw(st.permutations(range(len(terms))).map(lambda p: p[: len(p) // 2 + 1]))
    if not len(terms):
        return
    picked, direct = found.find(terms).columns(chosen), found.find(terms[chosen])
    for mine, theirs in zip(picked, direct, strict=True):
        assert mine.tolist() == theirs.tolist()


@given(DOCS, TEXT)
def test_find_orders_cells_the_same_by_table_or_by_sort(docs: list[str], text: str) -> None:
    # `find` orders the cells through a table when most of them hit, else by sorting: the
    # sums add in that order, so both ways must give the very same cells.
    index = TermIndex()
    found = Collection(index.entries(docs), index.slots())
    terms = np.array(list(dict.fromkeys(index.term_ids(text))), np.int32)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(relevance, "_DENSE", 0)  # always sort
        by_sort = found.find(terms)
        patch.setattr(relevance, "_DENSE", 10**9)  # always the table
        by_table = found.find(terms)
    for a, b in zip(by_sort, by_table, strict=True):
        assert a.tolist() == b.tolist()
