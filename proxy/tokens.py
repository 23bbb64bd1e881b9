"""Tokens: the model's tokenizer, a request counted the way the provider counts it, cached.

Tokenizer per model (name lowercased, provider prefix dropped):
- a policy `models.<name>.tokenizer: path/to/tokenizer.json` (relative to the policy file),
  loaded with the `tokenizers` package;
- `o200k_base` for gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1/o3/o4, chatgpt-4o, gpt-oss;
- `cl100k_base` for gpt-4, gpt-3.5 (and Azure's gpt-35), text-embedding-3/ada-002;
- else an estimate: cl100k_base x a per-family safety factor, rounded up, `estimated=True`.
  Factors are deliberate over-estimates (a budget must not be overrun): 1.25 for Claude
  and Mistral-family (SentencePiece/older BPE vocabularies split more than cl100k), 1.15
  for Llama 3, Qwen, Gemini/Gemma, DeepSeek (larger vocabularies, close to cl100k),
  1.25 for anything unknown.
tiktoken's encodings are the files litellm ships (proxy.token_text; never downloaded).

Counting (OpenAI's chat format; checked against published API counts in tests):
- each message: 3 + tokens(role) + tokens(content); a `name` adds tokens(name) + 1;
  a legacy `function` message costs 2 less; a `function_call` or each of `tool_calls`
  adds tokens(name) + tokens(arguments) + 3; a `tool_call_id` adds its tokens (a stand-in
  for the function name OpenAI renders there: slightly over, never under);
- content parts: text (and refusal) parts as text, `image_url` parts by proxy.images,
  other parts (audio, files) are not counted;
- per request: 3 for reply priming; `tools`/`functions` rendered as OpenAI's TypeScript
  namespace (`format_functions`) + 9, minus 4 when a system message is present, whose first
  one is padded with a newline; `tool_choice` "none" +1, a named tool +7 + tokens(name);
  a `response_format` json_schema: tokens of its name and compact JSON schema + 8.
Counts per message are cached by content (Python's 64-bit hash of the message's strings,
or of its JSON bytes), in a bounded LRU shared by all tokenizers.
"""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path
from typing import Any

import orjson

from proxy.images import ImageRule, image_rule, image_tokens
from proxy.policy import Policy
from proxy.token_text import CountCache, HFText, TiktokenText, format_functions, load_encoding
from proxy.types import Body, Message, Tokenizer
from proxy.windows import ContextWindows, base_model, policy_model

__all__ = ["ChatTokenizer", "ContextWindows", "TokenCounter"]  # ContextWindows: proxy.windows

log = logging.getLogger(__name__)

_O200K = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss")
_CL100K = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada")
_FACTORS = (
    (("claude", "anthropic", "mistral", "mixtral", "codestral", "ministral"), 1.25),
    (("llama", "qwen", "gemini", "gemma", "deepseek"), 1.15),
)
_DEFAULT_FACTOR = 1.25
_PLAIN_KEYS = frozenset(("role", "content", "name"))


class TokenCounter:
    """Every model's tokenizer, made once and kept; one count cache shared by all of them.

    Create one per process (in the app's lifespan); `for_model` is cheap after the first
    call for a model, and encodings load on first use (o200k_base takes ~0.2 s, ~77 MB).
    """

    def __init__(self, cache_entries: int = 200_000) -> None:
        self._cache = CountCache(cache_entries)
        self._lock = threading.Lock()
        self._texts: dict[str, TiktokenText | HFText] = {}
        self._tokenizers: dict[tuple[str, float, ImageRule], ChatTokenizer] = {}
        self._by_model: dict[tuple[str, str | None], ChatTokenizer] = {}

    def for_model(self, model: str, policy: Policy) -> Tokenizer:
        """The tokenizer for `model` under `policy` (its `models.<name>.tokenizer` first)."""
        return self.chat_tokenizer(model, policy)

    def loaded(self, model: str, policy: Policy) -> Tokenizer | None:
        """`for_model` if it is ready, else None: never loads anything (which can take a
        quarter of a second), so it is safe on the event loop."""
        return self._by_model.get(self._key(model, policy))

    def chat_tokenizer(self, model: str, policy: Policy) -> ChatTokenizer:
        """`for_model` with the concrete type (it also has `count_request`)."""
        key = self._key(model, policy)
        found = self._by_model.get(key)
        if found is None:
            with self._lock:
                found = self._by_model.get(key) or self._build(*key)
                if len(self._by_model) > 4096:  # model names come from clients: stay bounded
                    self._by_model.clear()
                self._by_model[key] = found
        return found

    @staticmethod
    def _key(model: str, policy: Policy) -> tuple[str, str | None]:
        configured = policy_model(model, policy)
        return model, _tokenizer_path(configured.tokenizer, policy) if configured else None

    def _build(self, model: str, path: str | None) -> ChatTokenizer:
        name = base_model(model)
        encoding, factor = _tiktoken_for(name)
        source: TiktokenText | HFText | None = None
        if path is not None:
            try:
                source, factor = self._hf(path), 1.0
            except Exception as exc:  # a bad file must not fail requests: estimate instead
                log.warning("tokenizer %s for %s unusable (%s); estimating", path, model, exc)
                encoding, factor = "cl100k_base", max(factor, _DEFAULT_FACTOR)
        if source is None:
            source = self._tiktoken(encoding)
        key = (source.name, factor, image_rule(name))
        if key not in self._tokenizers:
            self._tokenizers[key] = ChatTokenizer(source, self._cache, key[2], factor)
        return self._tokenizers[key]

    def _tiktoken(self, encoding: str) -> TiktokenText | HFText:
        if encoding not in self._texts:
            self._texts[encoding] = TiktokenText(load_encoding(encoding))
        return self._texts[encoding]

    def _hf(self, path: str) -> TiktokenText | HFText:
        if path not in self._texts:
            self._texts[path] = HFText(Path(path))
        return self._texts[path]


def _tiktoken_for(name: str) -> tuple[str, float]:
    """The tiktoken encoding for a normalized model name, and the estimate factor (1 = exact)."""
    if name.startswith(_O200K):
        return "o200k_base", 1.0
    if name.startswith(_CL100K):
        return "cl100k_base", 1.0
    for families, factor in _FACTORS:
        if any(family in name for family in families):
            return "cl100k_base", factor
    return "cl100k_base", _DEFAULT_FACTOR


def _tokenizer_path(path: str | None, policy: Policy) -> str | None:
    if not path:
        return None
    resolved = Path(path).expanduser()
    if not resolved.is_absolute() and policy.source and not policy.source.startswith("<"):
        resolved = Path(policy.source).parent / resolved
    return str(resolved)


class ChatTokenizer:
    """A model's `Tokenizer`: text counts from a backend, OpenAI's chat rules, a count cache."""

    def __init__(
        self, text: TiktokenText | HFText, cache: CountCache, images: ImageRule, factor: float = 1.0
    ) -> None:
        self._text = text
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
    def estimated(self) -> bool:
        return self._factor != 1.0

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

    def count_message(self, message: Message) -> int:
        content = message.get("content")
        if type(content) is str and message.keys() <= _PLAIN_KEYS:
            key = hash((self._tag, message.get("role"), content, message.get("name")))
        else:
            try:
                key = hash((self._tag, orjson.dumps(message)))
            except TypeError:  # not JSON-serializable: count without caching
                return self._scale(self._message(message))
        count = self._cache.get(key)
        if count is None:
            count = self._scale(self._message(message))
            self._cache.put(key, count)
        return count

    def count_messages(self, messages: list[Message]) -> list[int]:
        """`count_message` of each message, in one call: a request's history is counted
        in a loop of hundreds, where a call and a lookup per message add up."""
        tag, get, plain = self._tag, self._cache.get, _PLAIN_KEYS
        out: list[int] = []
        for m in messages:
            content = m.get("content")
            # A role and a text, the usual message, is within the plain keys at a glance.
            if type(content) is str and ((len(m) == 2 and "role" in m) or m.keys() <= plain):
                count = get(hash((tag, m.get("role"), content, m.get("name"))))
                if count is not None:
                    out.append(count)
                    continue
            out.append(self.count_message(m))
        return out

    def count_request_overhead(self, body: Body) -> int:
        return self._scale(self._overhead(body))

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

    def _overhead(self, body: Body) -> int:
        count = self._text.count
        n = 3  # every reply is primed with <|start|>assistant<|message|>
        # Bodies come from clients: any field may have any JSON type, so shapes are checked.
        functions = [t.get("function", t) for t in _dicts(body.get("tools"))]
        functions = [f for f in functions if isinstance(f, dict)] + _dicts(body.get("functions"))
        if functions:
            n += count(format_functions(functions)) + 9
            system = next((m for m in _dicts(body.get("messages")) if _role(m) == "system"), None)
            if system is not None:
                n -= 4
                text = system.get("content")
                if isinstance(text, str):  # OpenAI pads that system message with a newline
                    n += count(text + "\n") - count(text)
        choice = body.get("tool_choice", body.get("function_call"))
        if choice == "none":
            n += 1
        elif isinstance(choice, dict):
            named = choice.get("function") or choice
            name = named.get("name") if isinstance(named, dict) else None
            n += 7 + (count(name) if isinstance(name, str) else 0)
        response_format = body.get("response_format")
        schema = response_format.get("json_schema") if isinstance(response_format, dict) else None
        if isinstance(schema, dict):
            rendered = orjson.dumps(schema.get("schema")).decode()
            n += 8 + count(str(schema.get("name", ""))) + count(rendered)
        return n


def _dicts(value: object) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _role(message: object) -> object:
    return message.get("role") if isinstance(message, dict) else None
