"""Chat tokens: what a message and a request cost in a model's prompt, counted the way the
provider counts them, each message's count cached.

Counting (OpenAI's chat format; checked against published API counts in tests):
- each message: 3 + tokens(role) + tokens(content); a `name` adds tokens(name) + 1;
  a legacy `function` message costs 2 less; a `function_call` or each of `tool_calls`
  adds tokens(name) + tokens(arguments) + 3; a `tool_call_id` adds its tokens (a stand-in
  for the function name OpenAI renders there: slightly over, never under);
- content parts: text (and refusal) parts as text, `image_url` parts by images.py, other
  parts (audio, files) not; per request: 3 for reply priming (2 for o3/o4 models);
  `tools` (every kind: tool_kinds.py)/`functions` rendered as OpenAI's TypeScript namespace
  (function_schema.py; legacy `functions` alone nest as they did) + 9, less 1 for `tools`
  with a property that has no description (render_functions says why),
  minus 4 when a system message is present, whose first one is padded with a newline;
  `tool_choice` "none" +1, a named tool +7 + tokens(name), a named legacy `function_call` +4
  + tokens(name); a `response_format` json_schema: tokens of its name and JSON schema + 8.
Counts per message are cached by content (a 64-bit hash of its strings or JSON bytes), in
a bounded cache shared by all tokenizers (text.CountCache).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import TypeVar

import orjson

from proxy.tokens.images import ImageRule, image_tokens
from proxy.tokens.request_overhead import overhead_inputs, request_overhead
from proxy.tokens.text import CountCache, HFText, TiktokenText, in_thread
from proxy.tokens.tool_kinds import provider_tokens
from proxy.types import Alongside, Body, Message

_PLAIN_KEYS = frozenset(("role", "content", "name"))
# The fields request_overhead reads besides the messages; a body without any (the usual one) costs
# the priming alone, known without walking it.
_EXTRAS = frozenset({"tools", "functions", "tool_choice", "function_call", "response_format"})
# New message text from which count_messages counts in a thread (about 16k tokens, a few
# milliseconds of tiktoken: worth a thread's start).
_THREAD_CHARS = 64 * 1024
# Encodings whose pre-tokenizer ends a piece at a line break followed by a letter, so text
# cut just after it counts as the sum of its sides (tests/tokens/test_line_cuts.py).
_LINE_CUT_ENCODINGS = frozenset(("cl100k_base", "o200k_base"))
T = TypeVar("T")


class ChatTokenizer:
    """A model's `Tokenizer`: text counts from a backend, OpenAI's chat rules, a count cache."""

    def __init__(
        self,
        text: TiktokenText | HFText,
        cache: CountCache,
        images: ImageRule,
        factor: float = 1.0,
        priming: int = 3,
    ) -> None:
        self._text = text
        self._priming = priming
        self._cache = cache
        self._images = images
        self._factor = factor
        self._name = text.name if factor == 1.0 else f"estimate:{text.name}*{factor:g}"
        self._roles: dict[str, int] = {}
        self._tag = hash((self._name, images))  # the cache key's tokenizer part, hashed once

    @property
    def name(self) -> str:
        return self._name

    @property
    def factor(self) -> float:  # what the base encoding's counts are multiplied by; 1: exact
        return self._factor

    @property
    def estimated(self) -> bool:
        return self._factor != 1.0

    def scaled(self, factor: float) -> ChatTokenizer:
        """The same counting, its base encoding's counts times `factor` (a retry planned
        to an upstream's own count)."""
        return ChatTokenizer(self._text, self._cache, self._images, factor, self._priming)

    def count_text(self, text: str) -> int:
        key = hash(("t", self._tag, text))
        count = self._cache.get(key)
        if count is None:
            count = self._scale(self._text.count(text))
            self._cache.put(key, count)
        return count

    def truncate_text(self, text: str, max_tokens: int) -> str:
        limit = math.floor(max_tokens / self._factor + 1e-9)  # raw tokens within the budget
        if limit <= 0:
            return ""
        total, prefix = self._text.prefixes(text)
        if total <= limit:
            return text
        # A prefix of the tokens can re-encode differently; step until it provably fits
        # and one more token would not.
        k = limit
        best = prefix(k)
        while k > 0 and self._text.count(best) > limit:
            k -= 1
            best = prefix(k)
        while k < total:
            longer = prefix(k + 1)
            if self._text.count(longer) > limit:
                break
            k, best = k + 1, longer
        return best

    def count_lines_message(self, role: str, lines: Sequence[str]) -> tuple[Message, int]:
        """The message of `role` whose content is `lines` joined by line breaks, and its
        count_message, remembered as count_message would. Made of the lines' own cached
        counts when the encoding's pre-tokenizer always cuts after a line break that comes
        before a letter (cl100k and o200k: no piece joins a newline to a letter after it)
        and every line but the first starts with one: a recall of lines counted before,
        in a new selection, is counted without encoding it again."""
        message: Message = {"role": role, "content": "\n".join(lines)}
        key = self._key(message)
        if (
            key is None
            or self._text.name not in _LINE_CUT_ENCODINGS
            or not all(line[:1].isascii() and line[:1].isalpha() for line in lines[1:])
        ):
            return message, self.count_message(message)
        count = self._cache.get(key)
        if count is None:
            raw = self._raw_text
            content = sum(raw(line + "\n") for line in lines[:-1]) + raw(lines[-1])
            count = self._scale(3 + self._role(role) + content)
            self._cache.put(key, count)
        return message, count

    def _raw_text(self, text: str) -> int:
        """The encoding's own count of `text`, unscaled, cached (count_text's when exact)."""
        if self._factor == 1.0:
            return self.count_text(text)
        key = hash(("r", self._tag, text))
        count = self._cache.get(key)
        if count is None:
            count = self._text.count(text)
            self._cache.put(key, count)
        return count

    def _key(self, message: Message) -> int | None:
        """The count cache's key for `message`; None if it cannot have one."""
        content = message.get("content")
        if type(content) is str and message.keys() <= _PLAIN_KEYS:
            return hash((self._tag, message.get("role"), content, message.get("name")))
        try:
            return hash((self._tag, orjson.dumps(message)))
        except TypeError:  # not JSON-serializable: counted without caching
            return None

    def seen(self, messages: list[Message], unseen_chars: int = 16_384) -> bool:
        """Whether counting `messages` is mostly lookups (a chat's next turn): those without
        a cached count hold at most `unseen_chars` characters. Every message is looked up
        (~1 ms per MB): a sample could pass a body whose sampled places were seen before."""
        get, left = self._cache.get, unseen_chars
        for m in messages:
            key = self._key(m) if isinstance(m, dict) else None
            if key is None or get(key) is None:
                content = m.get("content") if isinstance(m, dict) else None
                if type(content) is not str:  # parts, calls: no cheap size, so not "seen"
                    return False
                left -= len(content)
                if left < 0:
                    return False
        return True

    def count_message(self, message: Message) -> int:
        key = self._key(message)
        if key is None:
            return self._scale(self._message(message))
        count = self._cache.get(key)
        if count is None:
            count = self._scale(self._message(message))
            self._cache.put(key, count)
        return count

    def count_messages(
        self, messages: list[Message], alongside: Alongside | None = None
    ) -> list[int]:
        """`count_message` of each message, in one call: a request's history is counted
        in a loop of hundreds, where a call and a lookup per message add up.

        The usual messages (a role and a text) not counted before are counted together,
        in one call to the tokenizer (`count_many`). When they come to _THREAD_CHARS or
        more (a first look at a long conversation), that call runs in a thread, free of
        the GIL, and `alongside` runs on this thread meanwhile: work the caller may need
        (reading the history for relevance), done in steps while its argument says the
        count still runs. Otherwise `alongside` is not run.
        """
        tag, get, put, plain = self._tag, self._cache.get, self._cache.put, _PLAIN_KEYS
        out: list[int] = []
        new: list[tuple[int, int, str, str]] = []  # place in out, cache key, role, text
        for m in messages:
            content = m.get("content")
            # A role and a text, the usual message, is within the plain keys at a glance.
            if type(content) is str and ((len(m) == 2 and "role" in m) or m.keys() <= plain):
                role = m.get("role")
                key = hash((tag, role, content, m.get("name")))
                count = get(key)
                if count is None:
                    if len(m) == 2 and type(role) is str and role != "function":
                        new.append((len(out), key, role, content))  # counted below
                        count = 0
                    else:
                        count = self._scale(self._message(m))
                        put(key, count)
                out.append(count)
                continue
            out.append(self.count_message(m))
        if new:
            texts = [text for _, _, _, text in new]
            if alongside is not None and sum(map(len, texts)) >= _THREAD_CHARS:
                counting = in_thread(partial(self._text.count_many, texts))
                alongside(counting.running)
                counts = counting.result()
            else:
                counts = self._text.count_many(texts)
            for (place, key, role, _), n in zip(new, counts, strict=True):
                # 3 + role + content, as _message counts a message without a name.
                out[place] = count = self._scale(3 + self._role(role) + n)
                put(key, count)
        return out

    def count_request_overhead(self, body: Body) -> int:
        if _EXTRAS.isdisjoint(body):
            n = self._priming
        else:  # tools: rendered and counted once per set (a client resends the same ones)
            read = overhead_inputs(body, _EXTRAS)
            key = hash(("o", self._tag, read)) if read is not None else None
            cached = self._cache.get(key) if key is not None else None
            if cached is None:
                n = request_overhead(body, self._raw_text, self._priming)
                if key is not None:
                    self._cache.put(key, n)
            else:
                n = cached
        return self._scale(n) + provider_tokens(body)  # a provider's own prompt, its tokens

    def count_request(self, body: Body) -> int:
        """All prompt tokens of a chat-completion body: its messages plus the overhead."""
        messages = body.get("messages") or ()
        return sum(self.count_message(m) for m in messages) + self.count_request_overhead(body)

    def _scale(self, raw: int) -> int:
        return raw if self._factor == 1.0 else math.ceil(raw * self._factor)

    def _message(self, message: Message) -> int:
        count = self._text.count
        role = message.get("role")
        n = 3 + (self._role(role) if isinstance(role, str) else 0)
        content = message.get("content")
        if isinstance(content, str):
            n += count(content)
        elif isinstance(content, list):
            n += sum(self._part(part) for part in content)
        name = message.get("name")
        if isinstance(name, str) and name:
            n += count(name) + 1
        if role == "function":
            n -= 2
        calls = [message.get("function_call")]
        calls += [c.get("function") for c in message.get("tool_calls") or () if isinstance(c, dict)]
        for call in calls:
            if isinstance(call, dict):
                parts = (call.get("name"), call.get("arguments"))
                n += 3 + sum(count(v) for v in parts if isinstance(v, str))
        for key in ("tool_call_id", "refusal"):
            value = message.get(key)
            if isinstance(value, str):
                n += count(value)
        return n

    def _role(self, role: str) -> int:
        # A handful of roles recur in every message: remember their counts.
        found = self._roles.get(role)
        if found is None:
            found = self._text.count(role)
            if len(self._roles) < 64:
                self._roles[role] = found
        return found

    def _part(self, part: object) -> int:
        if isinstance(part, str):
            return self._text.count(part)
        if not isinstance(part, dict):
            return 0
        kind = part.get("type")
        if kind == "image_url":
            return image_tokens(part.get("image_url"), self._images)
        text = part.get("text") if kind in ("text", "input_text") else part.get("refusal")
        return self._text.count(text) if isinstance(text, str) else 0
