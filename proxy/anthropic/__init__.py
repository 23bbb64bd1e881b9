"""Anthropic's Messages API: its blocks <-> the neutral chat messages the planner works on,
its usage and its error shape."""

from proxy.anthropic.answer import anthropic_usage, error_json, message_text
from proxy.anthropic.read import Converted, is_messages_body, to_chat
from proxy.anthropic.write import to_messages

__all__ = [
    "Converted",
    "anthropic_usage",
    "error_json",
    "is_messages_body",
    "message_text",
    "to_chat",
    "to_messages",
]
