"""Counting as the provider bills: encodings, chat and tool schemas, images, windows."""

from proxy.tokens.countable import cost_in_text
from proxy.tokens.counter import ChatTokenizer, TokenCounter
from proxy.tokens.function_schema import json_text as deep_json_text
from proxy.tokens.prices import (
    CACHE_WRITES,
    LONG_CACHE_WRITES,
    Cache,
    Prices,
    billed,
    request_cost,
    trim_savings,
)
from proxy.tokens.windows import ContextWindows, policy_model

__all__ = [
    "CACHE_WRITES",
    "LONG_CACHE_WRITES",
    "Cache",
    "ChatTokenizer",
    "ContextWindows",
    "Prices",
    "TokenCounter",
    "billed",
    "cost_in_text",
    "deep_json_text",
    "policy_model",
    "request_cost",
    "trim_savings",
]
