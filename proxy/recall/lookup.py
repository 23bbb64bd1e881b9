"""Lookup: what a recall id or a query names, found in the request in flight.

The client resent the whole history, and the plan forwarded part of it: an omitted part is
an original message that the forwarded request does not hold as it came. An id names the
message whose digest it carries (planner/parts/recall_ids.py) and, by its kind, how far
the part reaches from there: the message alone (`m`), its reply's assistant messages
(`r`), or the stretch of turns (`t`) up to the next message forwarded as it came. A query
names the omitted messages that best match it (BM25, relevance/). Nothing is kept between
requests: the lookup is made from the two lists when the model first asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.planner import DIGEST_CHARS, RECALL_KINDS, message_digest, quote, tool_name
from proxy.relevance import TermIndex, score_history

_OPERATOR = ("system", "developer")
_RESULTS = ("tool", "function")
_MADE = "[context-proxy:"  # a marker, a placeholder or a recall: the proxy's own text
_CONTEXT = 8  # the newest messages read as what the conversation is about now


class Recallable:
    """The omitted parts of one request: the client's messages (`original`, as the planner
    read them) against what was forwarded (`forwarded`, the planner's messages). `index`:
    the words of histories read before (the planner's, relevance/), so a query scores the
    history without reading it again; what a query needs of the request (its texts, what
    was omitted) is read once, on the first query, and serves every call after it."""

    def __init__(
        self, original: Sequence[Any], forwarded: Sequence[Any], index: TermIndex | None = None
    ) -> None:
        self._original = original
        self._forwarded = forwarded
        self._index = index
        self._digests: list[str] | None = None
        self._sent: set[str] | None = None
        self._texts: list[str] | None = None
        self._omitted: set[int] | None = None
        # The current turn (the last user message on) is never omitted: where parts end.
        users = [i for i, m in enumerate(original) if _role(m) == "user"]
        self._end = users[-1] if users else len(original)

    def _read(self) -> tuple[list[str], set[str]]:
        if self._digests is None or self._sent is None:
            self._digests = [message_digest(m) for m in self._original]
            self._sent = {message_digest(m) for m in self._forwarded if not _made(m)}
        return self._digests, self._sent

    def span(self, recall_id: str) -> list[int]:
        """The original messages an id names (empty when it names none): every message
        that carries its digest, and how far its kind reaches from each."""
        rid = recall_id.strip()
        kind, digest = rid[:1], rid[1:]
        if kind not in RECALL_KINDS or len(digest) != DIGEST_CHARS:
            return []
        digests, sent = self._read()
        out: list[int] = []
        for start, d in enumerate(digests[: self._end]):
            if d != digest:
                continue
            out.append(start)
            if kind == "m":
                continue
            for i in range(start + 1, self._end):
                if digests[i] in sent or (kind == "r" and _role(self._original[i]) != "assistant"):
                    break
                out.append(i)
        return sorted(set(out))

    def omitted(self) -> list[int]:
        """The history's messages not forwarded as they came (the setup's operator text
        aside: it is the operator's, not the conversation's)."""
        digests, sent = self._read()
        return [
            i
            for i in range(self._end)
            if digests[i] not in sent and _role(self._original[i]) not in _OPERATOR
        ]

    def matching(self, query: str) -> list[tuple[int, float]]:
        """The omitted messages that match `query`, the best first, with their scores:
        scored among the whole history (its words' rarity, each message's neighbours) with
        the newest messages as context, as the planner ranks older turns."""
        if self._texts is None or self._omitted is None:
            self._omitted = set(self.omitted())
            self._texts = [text_of(self._original[i]) for i in range(self._end)]
            if self._index is None:  # the history's words, read once for every query
                self._index = TermIndex()
        omitted, texts, words = self._omitted, self._texts, self._index
        if not omitted:
            return []
        plain = score_history(query, texts, spread=(), speaker=0.0, feedback=0.0, index=words)
        if not any(score > 0.0 for score in plain):
            return []  # no word of the query anywhere: the context alone matches nothing
        context = "\n".join(texts[-_CONTEXT:])
        scores = score_history(query, texts, context=context, index=words)
        ranked = sorted(
            ((i, s) for i, s in enumerate(scores) if i in omitted and s > 0.0),
            key=lambda p: (-p[1], -p[0]),
        )
        return ranked

    def quoted(self, i: int) -> str:
        """Message i as a recalled part: whose it was, then its text quoted."""
        m = self._original[i]
        role = _role(m)
        if role in _RESULTS:
            call = next((c for c in reversed(self._original[:i]) if _role(c) == "assistant"), None)
            return quote(f"Result of {tool_name(m, call)}", text_of(m))
        if role == "assistant":
            calls = _calls(m)
            text = text_of(m)
            if calls:
                text = (text + "\n" if text else "") + "\n".join(calls)
            return quote("Assistant", text)
        if role in _OPERATOR:
            return quote("Operator", text_of(m))
        return quote("User", text_of(m))


def text_of(message: Any) -> str:
    """A message's text: its string content, or its text parts joined (an image or a
    file as a word saying so)."""
    content = message.get("content") if type(message) is dict else None
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        text = part.get("text")
        if isinstance(text, str):
            parts.append(text)
        elif part.get("type") in ("image_url", "input_image", "image"):
            parts.append("[an image]")
        elif part.get("type") in ("file", "input_file", "document"):
            parts.append("[a file]")
    return "\n".join(parts)


def _role(message: Any) -> str:
    role = message.get("role") if type(message) is dict else None
    return role if isinstance(role, str) else "?"


def _made(message: Any) -> bool:
    content = message.get("content") if type(message) is dict else None
    return isinstance(content, str) and content.startswith(_MADE)


def _calls(message: Any) -> list[str]:
    calls = message.get("tool_calls") if type(message) is dict else None
    out: list[str] = []
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            out.append(f"(called {function.get('name')} with {function.get('arguments')})")
    return out
