"""Counting as the provider bills: encodings, chat and tool schemas, images, windows."""

from proxy.tokens.counter import ChatTokenizer, TokenCounter
from proxy.tokens.windows import ContextWindows, policy_model

__all__ = [
    "ChatTokenizer",
    "ContextWindows",
    "TokenCounter",
    "policy_model",
]
