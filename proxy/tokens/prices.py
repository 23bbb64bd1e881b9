"""Tokens (prices): per-token USD prices from litellm's bundled model map, and a request's
cost as the provider bills it.

The map's `input_cost_per_token`, `cache_read_input_token_cost`,
`cache_creation_input_token_cost` (and its `_above_1hr` price for one-hour writes) and
`output_cost_per_token` (read with the windows, by ContextWindows; litellm is never
imported). A model without an input price is unknown (its cost is null); one without a
cached price pays the input price for cached tokens (no discount is known), one without a
write price the input price for cache writes, one without an output price nothing for
output.
"""

from __future__ import annotations

from typing import NamedTuple

# Cache writes in a usage's input details (the Responses API's names, which the usage row
# reads): Anthropic reports them apart from its cache reads, and bills them apart.
CACHE_WRITES, LONG_CACHE_WRITES = "cache_write_tokens", "cache_write_1h_tokens"
# Costs are rounded to a billionth of a dollar: float noise (2.7500000000000004e-05) stays
# out of the usage log, and a billionth is far below any provider's price of one token.
COST_DIGITS = 9


class Prices(NamedTuple):
    """USD per token: uncached input, input served from the provider's cache, output, and
    input written to the cache (for five minutes; for an hour)."""

    input: float
    cached: float
    output: float
    write: float = -1.0  # -1: the input price
    write_long: float = -1.0  # -1: the write price

    def written(self, long: bool = False) -> float:
        short = self.input if self.write < 0 else self.write
        return short if not long or self.write_long < 0 else self.write_long


class Cache(NamedTuple):
    """What of a prompt the provider served from its cache (`read`) and wrote to it
    (`written`, of which `long` for an hour), as its usage reported: part of the prompt."""

    read: int = 0
    written: int = 0
    long: int = 0


def entry_prices(entry: dict[str, object]) -> Prices | None:
    """The prices in one entry of the map, or None when it has no input price."""
    price_in = _price(entry.get("input_cost_per_token"))
    if price_in is None:
        return None
    cached = _price(entry.get("cache_read_input_token_cost"))
    output = _price(entry.get("output_cost_per_token"))
    write = _price(entry.get("cache_creation_input_token_cost"))
    long = _price(entry.get("cache_creation_input_token_cost_above_1hr"))
    return Prices(
        price_in, price_in if cached is None else cached, output or 0.0,
        -1.0 if write is None else write, -1.0 if long is None else long,
    )  # fmt: skip


def request_cost(
    prices: Prices, prompt: int, cached: int | None, completion: int, written: int = 0,
    long: int = 0,
) -> float:  # fmt: skip
    """USD for one request: uncached prompt tokens, cached ones at the cached price, those
    written to the cache at the write price (`long` of them for an hour), output."""
    return round(_input_cost(prices, prompt, _cache(prompt, cached, written, long))
                 + completion * prices.output, COST_DIGITS)  # fmt: skip


def trim_savings(
    prices: Prices, before: int, after: int, prompt: int = 0, cached: int | None = None,
    written: int = 0, long: int = 0,
) -> float:  # fmt: skip
    """What trimming saved, as billed: the untrimmed prompt's `before` tokens at the read
    share the upstream reported for the `prompt` it was sent (the reads at the cached
    price, the rest at the input price) less what the `after` tokens sent cost at that
    prompt's shares, its cache writes at the write price. Negative when it cost more: a
    prompt trimming made the provider write again. Shares, not counts, carry over, so an
    estimated count is priced alike."""
    cache = _cache(prompt, cached, written, long)
    if prompt <= 0:
        return round((before - after) * prices.input, COST_DIGITS)
    read, wrote, held = cache.read / prompt, cache.written / prompt, cache.long / prompt
    plain = 1.0 - read - wrote
    untrimmed = before * (read * prices.cached + (1.0 - read) * prices.input)
    sent = after * (
        plain * prices.input + read * prices.cached + (wrote - held) * prices.written()
        + held * prices.written(long=True)
    )  # fmt: skip
    return round(untrimmed - sent, COST_DIGITS)


def billed(
    prices: Prices, counts: tuple[int, int], cache: Cache, trim: tuple[int, int] | None
) -> tuple[float, float]:
    """A request's cost and what trimming saved (0 when `trim`, the prompt's counts before
    and after trimming, is None), from its prompt and completion `counts` and what the
    upstream said of its cache: both trim counts are the proxy's, so the tokens removed
    are its own difference whatever the upstream's count of the prompt."""
    prompt, completion = counts
    cost = request_cost(prices, prompt, cache.read, completion, cache.written, cache.long)
    if trim is None:
        return cost, 0.0
    before, after = trim
    return cost, trim_savings(prices, before, after, prompt, cache.read, cache.written, cache.long)


def _cache(prompt: int, cached: int | None, written: int, long: int) -> Cache:
    """The reported reads and writes, held to the prompt whatever an upstream reports."""
    read = min(cached, prompt) if cached and cached > 0 else 0
    wrote = min(max(written, 0), prompt - read)
    return Cache(read, wrote, min(max(long, 0), wrote))


def _input_cost(prices: Prices, prompt: int, cache: Cache) -> float:
    plain = prompt - cache.read - cache.written
    short = cache.written - cache.long
    return (
        plain * prices.input + cache.read * prices.cached
        + short * prices.written() + cache.long * prices.written(long=True)
    )  # fmt: skip


def _price(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)
