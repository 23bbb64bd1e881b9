"""The rate limits' buckets (usage/rate_limits.py): a minute's worth at once, then refilled
at the limit's rate; requests admitted while something is left; settling gives back."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.usage.rate_limits import Draw, LocalRates, RateBook, Refused, reset_text


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_spends_a_minutes_worth_then_the_bucket_refills_at_the_limits_rate() -> None:
    clock = Clock()
    book = RateBook(clock)
    taken = [book.draw([Draw("t:a:requests", 60, 1, whole=True)]) for _ in range(100)]
    admitted = [t for t in taken if not isinstance(t, Refused)]
    assert len(admitted) == 60
    refused = taken[60]
    assert isinstance(refused, Refused) and 0 < refused.retry_after_s <= 1.01
    clock.now += 0.5  # half a request's worth: not a whole one
    assert isinstance(book.draw([Draw("t:a:requests", 60, 1, whole=True)]), Refused)
    clock.now += 0.5  # a second: one more request's worth
    assert not isinstance(book.draw([Draw("t:a:requests", 60, 1, whole=True)]), Refused)
    assert isinstance(book.draw([Draw("t:a:requests", 60, 1, whole=True)]), Refused)


def test_nothing_is_taken_unless_every_bucket_holds_something() -> None:
    book = RateBook(Clock())
    assert not isinstance(book.draw([Draw("t:a:tokens", 100, 500)]), Refused)  # in debt now
    got = book.draw([Draw("t:a:requests", 10, 1), Draw("t:a:tokens", 100, 0)])
    assert isinstance(got, Refused) and got.bucket == "t:a:tokens"
    assert 240 <= got.retry_after_s <= 241  # 400 tokens of debt at 100 a minute
    levels = book.draw([Draw("t:a:requests", 10, 1)])
    assert not isinstance(levels, Refused) and levels[0].remaining == 9  # none was taken


def test_settling_gives_back_what_was_not_used() -> None:
    clock = Clock()
    book = RateBook(clock)
    book.draw([Draw("t:a:tokens", 1000, 1000)])
    assert isinstance(book.draw([Draw("t:a:tokens", 1000, 0)]), Refused)
    book.settle("t:a:tokens", 1000, 700)  # it used 300 of the 1,000 it held
    levels = book.draw([Draw("t:a:tokens", 1000, 0)])
    assert not isinstance(levels, Refused) and levels[0].remaining == 700


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 500), st.lists(st.integers(1, 300), min_size=1, max_size=80))
def test_requests_at_once_overshoot_a_limit_by_one_request_at_most(
    limit: int, amounts: list[int]
) -> None:
    book = RateBook(Clock())
    admitted = [
        a for a in amounts if not isinstance(book.draw([Draw("b:tokens", limit, a)]), Refused)
    ]
    assert sum(admitted) <= limit + max(amounts)
    assert sum(admitted) >= min(limit, sum(amounts)) or len(admitted) == len(amounts)


def test_the_local_buckets_answer_as_the_shared_ones_do() -> None:
    rates = LocalRates()
    got = asyncio.run(rates.draw([Draw("t:a:requests", 2, 1)]))
    assert not isinstance(got, Refused) and got[0].remaining == 1


def test_reset_times_are_written_as_openai_writes_them() -> None:
    assert [reset_text(s) for s in (0.25, 1.0, 59.2, 360.0)] == ["250ms", "1s", "1m0s", "6m0s"]
