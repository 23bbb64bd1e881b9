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
from proxy.tokens import TokenCounter, cost_in_text
from proxy.tokens.calibration import (
    FLOOR_MARGIN,
    MIN_CHANGE,
    MIN_SAMPLES,
    RECENT,
    CountCalibration,
    band,
    high_ratio,
)

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
def test_the_factor_covers_most_answers_and_narrows(answers: list[tuple[int, float]]) -> None:
    """Never below the high quantile of the recent answers (all of the first nine), never
    above the family's factor unless they showed it must be."""
    calibration = CountCalibration()
    ratios: list[float] = []
    for raw, ratio in answers:
        reported = max(1, round(raw * ratio))
        calibration.observe("claude-x", raw, reported, 1.25)
        ratios.append(min(max(reported / raw, 1.0), 2.0))
        high = high_ratio(ratios[-RECENT:])
        factor = calibration.factor("claude-x") or 1.25
        assert factor >= min(high * (1 + FLOOR_MARGIN), 2.0) - 1e-3
        # (a move under MIN_CHANGE is not applied)
        assert factor <= max(1.25, high * (1 + FLOOR_MARGIN)) * (1 + MIN_CHANGE) + 1e-3
        if len(ratios) <= 9:
            assert factor >= min(max(ratios) * (1 + FLOOR_MARGIN), 2.0) - 1e-3


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(1e-6, 1e7, allow_nan=False), max_size=40),
    st.lists(st.floats(1e-6, 1e7, allow_nan=False), max_size=40),
)
def test_no_answer_and_no_fleet_figure_moves_the_factor_past_the_band(
    answers: list[float], fleet: list[float]
) -> None:
    calibration = CountCalibration()
    low, high = band(1.25)
    for ratio in answers:
        calibration.observe("claude-x", 1000, max(1, round(1000 * ratio)), 1.25)
        assert low - 1e-9 <= (calibration.factor("claude-x") or 1.25) <= high + 1e-3
    for ratio in fleet:
        calibration.install("claude-x", 50, ratio, 1.25)
        assert low - 1e-9 <= (calibration.factor("claude-x") or 1.25) <= high + 1e-3


def test_odd_answers_are_outvoted_and_the_factor_comes_back_down() -> None:
    calibration = CountCalibration()
    for _ in range(3):  # a body billed for what it does not hold (a fetched PDF)
        calibration.observe("claude-x", 40, 60_000, 1.25)
    assert calibration.factor("claude-x") == band(1.25)[1]
    for _ in range(RECENT):  # then ordinary answers, 1.1 the raw count
        calibration.observe("claude-x", 1000, 1100, 1.25)
    factor = calibration.factor("claude-x")
    assert factor is not None and 1.1 * (1 + FLOOR_MARGIN) <= factor < 1.25


def test_the_margin_narrows_as_answers_come_in() -> None:
    calibration = CountCalibration()
    factors = []
    for _ in range(100):  # the estimate is 19% over what the upstream counts
        calibration.observe("claude-x", 1000, 1050, 1.25)
        factors.append(calibration.factor("claude-x") or 1.25)
    assert factors[MIN_SAMPLES - 2] == 1.25  # too few answers to go below the family's
    assert factors[10] < 1.25 and factors[-1] < factors[10]
    assert factors[-1] >= 1.05 * (1 + FLOOR_MARGIN)


def test_a_reported_count_over_the_estimate_raises_the_models_count() -> None:
    counter = TokenCounter()
    body = {"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "word " * 500}]}
    before = counter.chat_tokenizer("claude-sonnet-4-6", Policy()).count_request(body)
    moved = counter.observe_reported("claude-sonnet-4-6", before, 1.25, 2 * before)
    assert moved is not None and moved == 2.0  # 2.5 wanted: the band's top
    after = counter.chat_tokenizer("claude-sonnet-4-6", Policy()).count_request(body)
    assert after >= 1.55 * before  # the next request counted up to the band's top
    elsewhere = counter.chat_tokenizer("claude-sonnet-4-6", Policy(), "https://other.test")
    assert elsewhere.count_request(body) == before  # another upstream: its own calibration
    exact = counter.chat_tokenizer("gpt-4o", Policy())
    assert exact.factor == 1.0 and MIN_SAMPLES >= 1


@settings(max_examples=200, deadline=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["type", "content", "output", "tools", "messages", "input", "x"]),
        inner, max_size=4),
    max_leaves=30,
))  # fmt: skip
def test_whether_a_body_is_all_text_is_answered_for_any_json(value: object) -> None:
    body = value if isinstance(value, dict) else {"messages": value}
    assert cost_in_text(body) in (True, False)


def test_a_document_image_or_server_tool_is_not_all_text() -> None:
    text = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert cost_in_text(text)
    for block in (
        {"type": "document", "source": {"type": "url", "url": "https://x.test/a.pdf"}},
        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
        {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image"}]},
        {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}},
    ):
        assert not cost_in_text({"messages": [{"role": "user", "content": [block]}]})
    assert not cost_in_text({**text, "tools": [{"type": "web_search_20250305"}]})
    assert not cost_in_text({**text, "mcp_servers": []})
    assert cost_in_text({**text, "tools": [{"name": "f", "input_schema": {}}]})


def test_a_length_refusal_raises_the_factor_at_once_and_holds_for_the_recent_answers() -> None:
    """Twenty answers at 1.10 settled the factor; one refusal counted 1.40 of the raw
    estimate: the high quantile would pass it over as one answer of 21, but the upstream
    refused the request, so the factor rises to it at once and stays while the next
    RECENT answers come in; then it follows them again."""
    calibration = CountCalibration()
    for _ in range(20):
        calibration.observe("claude-x", 1000, 1100, 1.25)
    settled = calibration.factor("claude-x") or 1.25
    assert settled < 1.4
    raised = calibration.refused("claude-x", 1000, 1400, 1.25)
    assert raised == math.ceil(1.4 * (1 + FLOOR_MARGIN) * 1000) / 1000
    for _ in range(RECENT - 1):
        calibration.observe("claude-x", 1000, 1100, 1.25)
        assert calibration.factor("claude-x") == raised
    calibration.observe("claude-x", 1000, 1100, 1.25)
    assert (calibration.factor("claude-x") or 1.25) < raised
    assert calibration.refused("claude-x", 1000, 10**9, 1.25) == band(1.25)[1]  # bounded
    assert calibration.refused("claude-x", 0, 1400, 1.25) is None


def test_a_refusal_reaches_the_fleet_with_the_ratio_it_showed() -> None:
    calibration = CountCalibration()
    calibration.refused("claude-x", 1000, 1500, 1.25)
    assert calibration.take_unsent() == {"claude-x": (1, 1.5)}
