"""A tiny deterministic tokenizer for planner tests: one token per whitespace word."""

from __future__ import annotations

import re
from typing import Any


class WordTokenizer:
    """Counts words; each message costs 3 plus its role, content words, tool calls."""

    name = "words"
    estimated = False

    def count_text(self, text: str) -> int:
        return len(text.split())

    def truncate_text(self, text: str, max_tokens: int) -> str:
        if max_tokens <= 0:
            return ""
        words = text.split()
        if len(words) <= max_tokens:
            return text
        # the prefix of `text` up to the end of word number `max_tokens`
        pos = 0
        for _ in range(max_tokens):
            while pos < len(text) and text[pos].isspace():
                pos += 1
            while pos < len(text) and not text[pos].isspace():
                pos += 1
        return text[:pos]

    def count_message(self, message: dict[str, Any]) -> int:
        n = 3 + 1
        content = message.get("content")
        if isinstance(content, str):
            n += self.count_text(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    n += self.count_text(part["text"])
                elif isinstance(part, dict):
                    n += 85
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                n += 3 + self.count_text(str(call["function"].get("arguments", "")))
        if isinstance(message.get("name"), str):
            n += 1
        return n

    def count_request_overhead(self, body: dict[str, Any]) -> int:
        return 3


RECALL_ID = re.compile(r", recall [trm][0-9a-f]{6}")


def without_ids(text: object) -> str:
    """A forwarded text with the recall ids of its markers taken out (they are digests of
    what was omitted: tests compare the rest)."""
    return RECALL_ID.sub("", str(text))
