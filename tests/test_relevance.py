"""Tests for relevance: BM25 scoring of older history against the current turn."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.relevance import STOPWORDS, expand_neighbors, score_history, stem, terms

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
    docs = ["a", "How did you get into painting?", "A friend got me into it.", "b", "c", "d"]
    plain = score_history("How did Evan get into painting?", docs, spread=())
    spread = score_history("How did Evan get into painting?", docs, spread=(0.5, 0.25))
    assert plain[2] == 0.0  # the answer shares no term with the question
    assert spread[2] == pytest.approx(0.5 * plain[1] + plain[2])
    assert spread[0] == pytest.approx(0.5 * plain[1])
    assert spread[3] == pytest.approx(0.25 * plain[1])
    assert spread[4] == spread[5] == 0.0
    assert spread[1] == pytest.approx(plain[1])  # its neighbours had no score of their own


def test_rare_term_outweighs_common_term() -> None:
    # "caroline" is in half the turns, "adoption" in one: the rare term wins.
    docs = ["Caroline: hello there", "Caroline: hello again", "Melanie: adoption", "Bob: x"]
    scores = score_history("caroline adoption", docs, spread=())
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
    assert score_history("cookies", ["", "", "", "cookies"])[:1] == [0.0]
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
    """The textbook formula, word by word, with no shortcuts."""
    q = {t: weight for t in terms(context)} | {t: 1.0 for t in terms(query)}
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
                s += idf * tf[t] * 2.2 / (tf[t] + 1.2 * (0.25 + 0.75 * len(tk) / avg))
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
    got = score_history(query, docs, spread=(), context=context, context_weight=w)
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
    assert score_history(query, docs, spread=()) == pytest.approx(reference_bm25(query, docs))


@given(TEXT, DOCS, st.lists(st.floats(0, 1), max_size=3).map(tuple))
def test_spread_matches_reference(query: str, docs: list[str], w: tuple[float, ...]) -> None:
    expected = reference_spread(reference_bm25(query, docs), w)
    assert score_history(query, docs, spread=w) == pytest.approx(expected)


@given(TEXT, DOCS, st.randoms(use_true_random=False))
def test_permutation_consistent(query: str, docs: list[str], rnd: object) -> None:
    # Plain BM25 does not depend on order (spread does, by design).
    order = list(range(len(docs)))
    rnd.shuffle(order)  # type: ignore[attr-defined]
    scores = score_history(query, docs, spread=())
    shuffled = score_history(query, [docs[i] for i in order], spread=())
    assert shuffled == pytest.approx([scores[i] for i in order])


@given(st.text(max_size=20))
def test_stem_minus_last_letter_is_a_prefix(word: str) -> None:
    # score_history relies on this to stem only candidate words.
    w = word.lower()
    assert w.startswith(stem(w)[:-1])
