"""Estimated models (no public tokenizer) are counted with a factor the upstream's reports
calibrate: never below what an answer showed, narrowing as answers come in, and never
short on Anthropic's published token-counting examples."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.anthropic import to_chat
from proxy.policy.model import Policy
from proxy.tokens import TokenCounter
from proxy.tokens.calibration import FLOOR_MARGIN, MIN_SAMPLES, CountCalibration

OPUS = "claude-opus-4-20250514"
WEATHER = {"name": "get_weather", "description": "Get the current weather in a given location",
           "input_schema": {"type": "object", "properties": {"location": {
               "type": "string", "description": "The city and state, e.g. San Francisco, CA"}},
               "required": ["location"]}}  # fmt: skip
PRIMES = "Are there an infinite number of prime numbers such that n mod 4 == 3?"
# Anthropic's documentation of token counting: each body and the count its API gave.
PUBLISHED: list[tuple[dict[str, Any], int]] = [
    ({"system": "You are a scientist", "messages": [{"role": "user", "content": "Hello, Claude"}]}, 14),
    ({"tools": [WEATHER], "messages": [
        {"role": "user", "content": "What's the weather like in San Francisco?"}]}, 403),
    ({"thinking": {"type": "enabled", "budget_tokens": 16000}, "messages": [
        {"role": "user", "content": PRIMES},
        {"role": "assistant", "content": [
            {"type": "thinking", "signature": "EuYBCkQYAiJAgCs1le6/Pol5Z4/JMomVOouGrWdhYNsH3uk",
             "thinking": "This is a nice number theory question. Let's think about it step by step..."},
            {"type": "text", "text": "Yes, there are infinitely many prime numbers p such that p mod 4 = 3..."}]},
        {"role": "user", "content": "Can you write a formal proof?"}]}, 88),
]  # fmt: skip


def test_anthropics_published_counts_are_never_under_estimated() -> None:
    tokens = TokenCounter().chat_tokenizer(OPUS, Policy())
    for body, published in PUBLISHED:
        counted = tokens.count_request(to_chat({"model": OPUS, **body}).body)
        assert published <= counted <= 1.7 * published, (published, counted)


def test_the_factor_starts_at_the_familys_and_moves_only_on_evidence() -> None:
    calibration = CountCalibration()
    assert calibration.factor("claude-x") is None
    assert calibration.observe("claude-x", 1000, 1100, 1.25) is None  # 1.10: within 1.25
    assert calibration.factor("claude-x") is None
    assert (
        calibration.observe("claude-x", 1000, 1400, 1.25)
        == math.ceil(1.4 * (1 + FLOOR_MARGIN) * 1000) / 1000
    )


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(100, 100_000), st.floats(0.6, 1.6)), min_size=1, max_size=60))
def test_the_factor_is_never_below_any_answer_and_narrows(answers: list[tuple[int, float]]) -> None:
    calibration = CountCalibration()
    worst = 0.0
    for raw, ratio in answers:
        reported = max(1, round(raw * ratio))
        calibration.observe("claude-x", raw, reported, 1.25)
        worst = max(worst, reported / raw)
        factor = calibration.factor("claude-x") or 1.25
        assert factor >= worst * (1 + FLOOR_MARGIN) - 1e-3  # never short of an answer
        assert factor <= max(1.25, worst * (1 + FLOOR_MARGIN)) + 1e-3


def test_the_margin_narrows_as_answers_come_in() -> None:
    calibration = CountCalibration()
    factors = []
    for _ in range(100):  # the estimate is 25% over what the upstream counts
        calibration.observe("claude-x", 1000, 800, 1.25)
        factors.append(calibration.factor("claude-x") or 1.25)
    assert factors[MIN_SAMPLES - 2] == 1.25  # too few answers to go below the family's
    assert factors[10] < 1.0 and factors[-1] < factors[10]
    assert factors[-1] >= 0.8 * (1 + FLOOR_MARGIN)


def test_a_reported_count_over_the_estimate_raises_the_models_count() -> None:
    counter = TokenCounter()
    body = {"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "word " * 500}]}
    before = counter.chat_tokenizer("claude-sonnet-4-6", Policy()).count_request(body)
    moved = counter.observe_reported("claude-sonnet-4-6", before, 1.25, 2 * before)
    assert moved is not None and moved > 2.4
    after = counter.chat_tokenizer("claude-sonnet-4-6", Policy()).count_request(body)
    assert after >= 2 * before  # the next request is counted at least as the upstream did
    exact = counter.chat_tokenizer("gpt-4o", Policy())
    assert exact.factor == 1.0 and MIN_SAMPLES >= 1
