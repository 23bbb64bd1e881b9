"""Long texts are encoded in pieces: exact at letter-space-letter cuts, and no tiktoken panic
on a hostile run of whitespace (its regex overflows its stack under a million spaces)."""

from __future__ import annotations

import random

import pytest

from proxy.tokens.text import TiktokenText, load_encoding, pieces


@pytest.fixture(scope="module", params=["o200k_base", "cl100k_base"])
def text_counter(request: pytest.FixtureRequest) -> TiktokenText:
    return TiktokenText(load_encoding(request.param))


def prose(chars: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    words = ["alpha", "Beta", "gamma,", "delta.", "42", "x\n", "naïve", "ok", "(paren)", "don't"]
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(words)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def test_pieces_cover_the_text_and_stay_short() -> None:
    text = prose(450_000)
    cut, inexact = pieces(text)
    assert inexact == 0
    assert "".join(cut) == text
    assert len(cut) > 4
    assert all(len(p) <= 100_000 for p in cut)


def test_a_long_text_counts_exactly_as_one_encode(text_counter: TiktokenText) -> None:
    text = prose(350_000)
    whole = len(text_counter._enc.encode_ordinary(text))
    assert text_counter.count(text) == whole
    assert text_counter.count_many([text, "short", text]) == [
        whole,
        text_counter.count("short"),
        whole,
    ]
    total, prefix = text_counter.prefixes(text)
    assert total == whole
    assert prefix(10) == text_counter._enc.decode(text_counter._enc.encode_ordinary(text)[:10])


@pytest.mark.parametrize("hostile", [" " * 2_000_000, "\n" * 1_500_000, " \t" * 800_000])
def test_a_hostile_run_of_whitespace_counts_without_a_panic(
    text_counter: TiktokenText, hostile: str
) -> None:
    text = "# " + hostile + "x"
    counted = text_counter.count(text)  # tiktoken alone panics on these (PanicException)
    assert counted >= len(text) // 256  # its longest whitespace token is 128 characters
    total, prefix = text_counter.prefixes(text)
    assert counted - 2 * pieces(text)[1] <= total <= counted
    assert prefix(total).endswith("x")


@pytest.mark.parametrize("run", [" ", "\n", " \t"])
def test_a_cut_inside_a_run_counts_over_never_under(text_counter: TiktokenText, run: str) -> None:
    text = "a " + run * (250_000 // len(run)) + "b"  # short enough for one encode
    whole = len(text_counter._enc.encode_ordinary(text))
    assert whole <= text_counter.count(text) <= whole + 3 * pieces(text)[1]
