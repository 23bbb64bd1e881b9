"""The ids/figures memo: the same sets as reading again, bounded in entries and in bytes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.relevance import TermIndex
from proxy.relevance.ids import figures_in, ids_in
from proxy.relevance.string_sets import StringSets


def counted(calls: list[str]) -> StringSets:
    def read(text: str) -> frozenset[str]:
        calls.append(text)
        return figures_in(text)

    return StringSets(read, max_entries=3, max_bytes=64_000)


def test_a_text_is_read_once_and_the_least_recently_used_go_first() -> None:
    calls: list[str] = []
    memo = counted(calls)
    texts = [f"order A{i}00 and 12{i}45" for i in range(4)]
    for t in texts[:3]:
        assert memo.get(t) == figures_in(t)
    memo.get(texts[0])  # used again: the newest now
    memo.get(texts[3])  # a fourth: texts[1], the least recently used, goes
    assert len(memo) == 3 and calls == [*texts[:3], texts[3]]
    memo.get(texts[0])
    memo.get(texts[2])
    assert calls[-1] == texts[3]  # both still remembered
    memo.get(texts[1])
    assert calls[-1] == texts[1]  # read again


def test_sets_of_a_megabyte_of_distinct_numbers_stay_within_the_bytes() -> None:
    memo = StringSets(figures_in, max_entries=100_000, max_bytes=4 * 2**20)
    for n in range(40):  # each ~50 KB of text, ~5,000 distinct numbers: ~0.4 MB as a set
        text = " ".join(str(10**8 * (n + 1) + k) for k in range(5000))
        assert len(memo.get(text)) == 5000
        assert memo.bytes <= 4 * 2**20
    assert 1 <= len(memo) < 40
    held, entries = memo.bytes, len(memo)
    huge = " ".join(str(10**11 + k) for k in range(60_000))  # over an eighth of the bound
    assert len(memo.get(huge)) == 60_000
    assert (memo.bytes, len(memo)) == (held, entries)  # returned, not kept: nothing went


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet="ab12 _-x9", max_size=60), max_size=30), st.integers(1, 5))
def test_the_memo_answers_as_reading_again_would(texts: list[str], entries: int) -> None:
    memo = StringSets(ids_in, max_entries=entries, max_bytes=2_000)
    for t in texts + texts[::-1]:
        assert memo.get(t) == ids_in(t)
        assert len(memo) <= entries and memo.bytes <= 2_000


def test_the_term_index_reads_ids_and_figures_through_bounded_memos() -> None:
    index = TermIndex(max_bytes=4 * 2**20)
    for n in range(30):
        text = " ".join(f"R{n}x{k}" for k in range(4000))
        assert index.ids(text) == ids_in(text) and index.figures(text) == figures_in(text)
