"""Cache and cost telemetry: cached_tokens as the upstream reported it, prices, cost and savings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.server.pipeline.exchange import Exchange
from proxy.tokens import ContextWindows
from proxy.tokens.prices import Prices, request_cost, trim_savings
from tests.usage.caching_upstream import CachingUpstream, caching_upstream, rows_of

__all__ = ["caching_upstream"]  # the fixture

SONNET = Prices(3e-06, 3e-07, 1.5e-05, 3.75e-06, 6e-06)
GPT4O = Prices(2.5e-06, 1.25e-06, 1e-05)  # litellm's bundled prices for gpt-4o

# --- take_usage -------------------------------------------------------------------------


def test_chat_usage_with_cached_tokens() -> None:
    ex = Exchange("r")
    ex.take_usage(
        {
            "prompt_tokens": 2006,
            "completion_tokens": 300,
            "prompt_tokens_details": {"cached_tokens": 1920},
        }
    )
    assert (ex.prompt_tokens, ex.completion_tokens, ex.cached_tokens) == (2006, 300, 1920)
    assert ex.usage_from_upstream


def test_responses_usage_with_cached_tokens() -> None:
    ex = Exchange("r")
    ex.take_usage(
        {
            "input_tokens": 1500,
            "output_tokens": 40,
            "total_tokens": 1540,
            "input_tokens_details": {"cached_tokens": 1024},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
    )
    assert (ex.prompt_tokens, ex.completion_tokens, ex.cached_tokens) == (1500, 40, 1024)
    assert ex.usage_from_upstream


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 5, "completion_tokens": 1},
        {"prompt_tokens": 5, "completion_tokens": 1, "prompt_tokens_details": None},
        {"prompt_tokens": 5, "completion_tokens": 1, "prompt_tokens_details": {}},
        {
            "prompt_tokens": 5,
            "completion_tokens": 1,
            "prompt_tokens_details": {"cached_tokens": True},
        },
        {
            "prompt_tokens": 5,
            "completion_tokens": 1,
            "prompt_tokens_details": {"cached_tokens": -3},
        },
        {"input_tokens": 5, "output_tokens": 1, "input_tokens_details": {"cached_tokens": "9"}},
    ],
)
def test_cached_tokens_stay_null_when_the_upstream_did_not_say(usage: dict[str, Any]) -> None:
    ex = Exchange("r")
    ex.take_usage(usage)
    assert ex.cached_tokens is None and ex.usage_from_upstream


def test_zero_cached_tokens_is_zero_not_null() -> None:
    ex = Exchange("r")
    ex.take_usage(
        {"prompt_tokens": 5, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 0}}
    )
    assert ex.cached_tokens == 0


def test_booleans_are_not_token_counts() -> None:
    ex = Exchange("r")
    ex.take_usage({"prompt_tokens": True, "completion_tokens": 1})
    assert not ex.usage_from_upstream


# --- prices and cost --------------------------------------------------------------------


def test_bundled_prices_for_known_models() -> None:
    windows = ContextWindows()
    assert windows.prices("gpt-4o") == GPT4O
    # The same name rules as the windows: provider prefix, case, date suffix.
    assert windows.prices("openai/GPT-4o-2024-08-06") is not None
    assert windows.prices("no-such-model-anywhere") is None
    assert windows.prices("no-such-model-anywhere") is None  # cached as unknown


def test_prices_from_a_registry_file(tmp_path: Path) -> None:
    registry = tmp_path / "map.json"
    registry.write_bytes(
        orjson.dumps(
            {
                "full": {
                    "input_cost_per_token": 1e-6,
                    "cache_read_input_token_cost": 1e-7,
                    "output_cost_per_token": 2e-6,
                    "max_input_tokens": 1000,
                },
                "nocache": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6},
                "noinput": {"output_cost_per_token": 2e-6, "max_input_tokens": 1000},
                "weird": {"input_cost_per_token": "cheap"},
                "sample_spec": "not an entry",
            }
        )
    )
    windows = ContextWindows(registry)
    assert windows.prices("full") == Prices(1e-6, 1e-7, 2e-6)
    assert windows.prices("nocache") == Prices(1e-6, 1e-6, 2e-6)  # no discount known
    assert windows.prices("noinput") is None and windows.registry_window("noinput") == 1000
    assert windows.prices("weird") is None
    assert ContextWindows(tmp_path / "absent.json").prices("full") is None


def test_priced_names_are_bounded(tmp_path: Path) -> None:
    windows = ContextWindows(tmp_path / "absent.json")
    for i in range(3000):
        windows.prices(f"client-chosen-{i}")
    assert len(windows._priced) <= 1024


def test_request_cost_splits_cached_and_uncached_input() -> None:
    assert request_cost(GPT4O, 2000, 1024, 100) == pytest.approx(
        976 * 2.5e-06 + 1024 * 1.25e-06 + 100 * 1e-05
    )
    assert request_cost(GPT4O, 2000, None, 100) == pytest.approx(2000 * 2.5e-06 + 100 * 1e-05)
    # An upstream that reports more cached than prompt tokens is not paid for twice.
    assert request_cost(GPT4O, 10, 50, 0) == pytest.approx(10 * 1.25e-06)
    assert request_cost(GPT4O, 0, None, 0) == 0.0
    # Savings as billed: the untrimmed 3,000 tokens at the sent prompt's read share.
    assert trim_savings(GPT4O, 3000, 2000) == pytest.approx(1000 * 2.5e-06)
    share = 1024 / 2000
    untrimmed = 3000 * (share * 1.25e-06 + (1 - share) * 2.5e-06)
    sent = 976 * 2.5e-06 + 1024 * 1.25e-06
    assert trim_savings(GPT4O, 3000, 2000, 2000, 1024) == pytest.approx(untrimmed - sent)
    assert trim_savings(GPT4O, 2000, 2000) == 0.0


def test_cache_writes_are_billed_at_the_write_price_and_can_undo_a_saving() -> None:
    """Anthropic bills a cache write at 1.25x the input price (2x for an hour): a trimmed
    prompt the provider has to write again can cost more than trimming removed."""
    assert request_cost(SONNET, 10_000, 2_000, 100, 8_000) == pytest.approx(
        2_000 * 3e-07 + 8_000 * 3.75e-06 + 100 * 1.5e-05
    )
    assert request_cost(SONNET, 10_000, 0, 0, 8_000, 8_000) == pytest.approx(
        2_000 * 3e-06 + 8_000 * 6e-06
    )
    # 200 tokens removed, but the 9,000 kept written again: it cost more than it saved.
    assert trim_savings(SONNET, 10_200, 10_000, 10_000, 1_000, 9_000) < 0
    # Removing much with a cache read stays a saving.
    assert trim_savings(SONNET, 40_000, 10_000, 10_000, 9_000, 1_000) > 0
    # Without a write price the write is billed as input.
    assert request_cost(GPT4O, 1000, 0, 0, 500) == pytest.approx(1000 * 2.5e-06)


def test_costs_carry_no_float_noise() -> None:
    assert orjson.dumps(request_cost(GPT4O, 11, None, 7)) == b"0.0000975"


# --- end to end: an upstream that reports cached tokens ----------------------------------


def test_usage_log_cached_tokens_match_the_upstream_request_by_request(
    start_proxy: Any, caching_upstream: tuple[CachingUpstream, str]
) -> None:
    proxy = start_proxy(upstream=caching_upstream[1])
    plan = [("1024", False), ("none", True), ("0", False), ("1408", True), ("none", False),
            ("1152", True), ("128", True)]  # fmt: skip
    for cached, stream in plan:
        body = {
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": stream,
        }
        r = httpx.post(proxy.url + "/v1/chat/completions", json=body, headers={"x-cached": cached})
        assert r.status_code == 200
        if stream:
            assert b'"cached_tokens"' not in r.content  # the client did not ask for usage
    rows = rows_of(proxy, len(plan))
    assert [(r["cached_tokens"], r["stream"]) for r in rows] == [
        (None if c == "none" else int(c), s) for c, s in plan
    ]
    for row, (cached, _) in zip(rows, plan, strict=True):
        hit = 0 if cached == "none" else int(cached)
        assert row["usage_source"] == "upstream" and row["prompt_tokens"] == 1500
        assert row["cost_usd"] == pytest.approx((1500 - hit) * 2.5e-06 + hit * 1.25e-06 + 9e-05)
        assert row["saved_usd"] == 0.0  # nothing trimmed


def test_usage_row_prices_what_trimming_saved(
    start_proxy: Any, caching_upstream: tuple[CachingUpstream, str], policies_dir: Path
) -> None:
    (policies_dir / "default.yaml").write_text("models:\n  gpt-4o: {context_window: 600}\n")
    proxy = start_proxy(upstream=caching_upstream[1])
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "word " * 60}
             for i in range(21)]  # fmt: skip
    r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": turns})
    assert r.status_code == 200
    before, after = (
        int(r.headers["x-context-tokens-before"]),
        int(r.headers["x-context-tokens-after"]),
    )
    assert before > after
    [row] = rows_of(proxy, 1)
    assert row["saved_usd"] == pytest.approx((before - after) * 2.5e-06)
    assert row["cost_usd"] == pytest.approx(1500 * 2.5e-06 + 9e-05)


def test_unknown_model_costs_null(
    start_proxy: Any, caching_upstream: tuple[CachingUpstream, str], policies_dir: Path
) -> None:
    (policies_dir / "default.yaml").write_text("default_context_window: 8192\n")
    proxy = start_proxy(upstream=caching_upstream[1])
    body = {"model": "house-model-x", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(proxy.url + "/v1/chat/completions", json=body).status_code == 200
    [row] = rows_of(proxy, 1)
    assert row["cost_usd"] is None and row["saved_usd"] is None


def test_unanswered_request_costs_nothing(start_proxy: Any) -> None:
    proxy = start_proxy(upstream="http://127.0.0.1:9/v1")  # nothing listens there
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(proxy.url + "/v1/chat/completions", json=body).status_code == 502
    [row] = rows_of(proxy, 1)
    assert row["cost_usd"] == 0.0 and row["saved_usd"] == 0.0 and row["cached_tokens"] is None


def test_a_client_that_asks_for_usage_sees_the_cached_tokens_it_is_charged_for(
    start_proxy: Any, caching_upstream: tuple[CachingUpstream, str]
) -> None:
    proxy = start_proxy(upstream=caching_upstream[1])
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    r = httpx.post(proxy.url + "/v1/chat/completions", json=body, headers={"x-cached": "1536"})
    assert r.status_code == 200 and b'"cached_tokens":1536' in r.content
    [row] = rows_of(proxy, 1)
    assert row["cached_tokens"] == 1536 and row["stream"] is True


def test_responses_api_cached_tokens_match_the_upstream_request_by_request(
    start_proxy: Any, caching_upstream: tuple[CachingUpstream, str]
) -> None:
    proxy = start_proxy(upstream=caching_upstream[1])
    plan = [("1152", False), ("1280", True), ("none", True), ("0", False)]
    for cached, stream in plan:
        body = {"model": "gpt-4o", "input": "hi", "stream": stream}
        r = httpx.post(proxy.url + "/v1/responses", json=body, headers={"x-cached": cached})
        assert r.status_code == 200
    rows = rows_of(proxy, len(plan))
    assert [(r["api"], r["cached_tokens"], r["stream"]) for r in rows] == [
        ("responses", None if c == "none" else int(c), s) for c, s in plan
    ]
    for row, (cached, _) in zip(rows, plan, strict=True):
        hit = 0 if cached == "none" else int(cached)
        assert row["usage_source"] == "upstream" and row["prompt_tokens"] == 1300
        assert row["completion_tokens"] == 5
        assert row["cost_usd"] == pytest.approx((1300 - hit) * 2.5e-06 + hit * 1.25e-06 + 5e-05)
