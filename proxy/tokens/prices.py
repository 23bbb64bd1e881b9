"""Tokens (prices): per-token USD prices from litellm's bundled model map, and a request's cost.

The map's `input_cost_per_token`, `cache_read_input_token_cost` and `output_cost_per_token`
(read with the windows, by ContextWindows; litellm is never imported). A model without an
input price is unknown (its cost is null); one without a cached price pays the input price
for cached tokens (no discount is known), one without an output price pays nothing for output.
"""

from __future__ import annotations

from typing import NamedTuple

# Costs are rounded to a billionth of a dollar: float noise (2.7500000000000004e-05) stays
# out of the usage log, and a billionth is far below any provider's price of one token.
COST_DIGITS = 9


class Prices(NamedTuple):
    """USD per token: uncached input, input served from the provider's cache, output."""

    input: float
    cached: float
    output: float


def entry_prices(entry: dict[str, object]) -> Prices | None:
    """The prices in one entry of the map, or None when it has no input price."""
    price_in = _price(entry.get("input_cost_per_token"))
    if price_in is None:
        return None
    cached = _price(entry.get("cache_read_input_token_cost"))
    output = _price(entry.get("output_cost_per_token"))
    return Prices(price_in, price_in if cached is None else cached, output or 0.0)


def request_cost(prices: Prices, prompt: int, cached: int | None, completion: int) -> float:
    """USD for one request: uncached prompt tokens, cached ones at the cached price, output."""
    # The cached share cannot exceed the prompt, whatever an upstream reports.
    hit = min(cached, prompt) if cached and cached > 0 else 0
    usd = (prompt - hit) * prices.input + hit * prices.cached + completion * prices.output
    return round(usd, COST_DIGITS)


def trim_savings(prices: Prices, removed: int) -> float:
    """USD that `removed` prompt tokens would have cost at the uncached input price."""
    return round(removed * prices.input, COST_DIGITS) if removed > 0 else 0.0


def _price(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)
