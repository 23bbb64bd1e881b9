"""The Responses API's items <-> the neutral chat messages the planner works on."""

from proxy.items.read import MARK, Converted, Source, is_responses_body, to_chat
from proxy.items.usage import output_text
from proxy.items.write import to_responses

__all__ = [
    "MARK",
    "Converted",
    "Source",
    "is_responses_body",
    "output_text",
    "to_chat",
    "to_responses",
]
