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
tiktoken's encodings are the files litellm ships (proxy.tokens.text; never downloaded).
Counting itself is proxy.tokens.chat.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from proxy.policy import Policy
from proxy.tokens.calibration import CountCalibration
from proxy.tokens.chat import ChatTokenizer
from proxy.tokens.images import ImageRule, image_rule
from proxy.tokens.text import CountCache, HFText, TiktokenText, load_encoding
from proxy.tokens.windows import ContextWindows, base_model, policy_model
from proxy.types import Tokenizer

__all__ = [
    "ChatTokenizer",
    "ContextWindows",
    "TokenCounter",
]  # ContextWindows: proxy.tokens.windows

log = logging.getLogger(__name__)

_O200K = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss")
_CL100K = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada")
_FACTORS = (
    (("claude", "anthropic", "mistral", "mixtral", "codestral", "ministral"), 1.25),
    (("llama", "qwen", "gemini", "gemma", "deepseek"), 1.15),
)
_DEFAULT_FACTOR = 1.25


MAX_LEARNED = 1024  # windows upstreams said are smaller: model names come from clients
KEY_SEPARATOR = "\t"  # in neither a URL nor a model name a client can get past the limits


def calibration_key(upstream: str, model: str) -> str:
    """What the count calibration is kept under: answers from one upstream for one model."""
    return f"{upstream}{KEY_SEPARATOR}{model}"


class TokenCounter:
    """Every model's tokenizer, made once and kept; one count cache shared by all of them.

    Create one per process (in the app's lifespan); `for_model` is cheap after the first
    call for a model, and encodings load on first use (o200k_base takes ~0.2 s, ~77 MB).
    """

    def __init__(self, cache_entries: int = 100_000) -> None:
        self._cache = CountCache(cache_entries)
        self._lock = threading.Lock()
        self._texts: dict[str, TiktokenText | HFText] = {}
        self._tokenizers: dict[tuple[str, float, ImageRule, int], ChatTokenizer] = {}
        self._by_model: dict[tuple[str, str | None, str], ChatTokenizer] = {}
        self.calibration = CountCalibration()  # estimated models' factors, from answers
        self._windows: dict[str, int] = {}  # windows upstreams said are smaller, by key

    def for_model(self, model: str, policy: Policy, upstream: str = "") -> Tokenizer:
        """The tokenizer for `model` under `policy` (its `models.<name>.tokenizer` first);
        an estimate's factor is the one `upstream`'s answers calibrated."""
        return self.chat_tokenizer(model, policy, upstream)

    def loaded(self, model: str, policy: Policy, upstream: str = "") -> ChatTokenizer | None:
        """`for_model` if it is ready, else None: never loads anything (which can take a
        quarter of a second), so it is safe on the event loop."""
        return self._by_model.get(self._key(model, policy, upstream))

    def chat_tokenizer(self, model: str, policy: Policy, upstream: str = "") -> ChatTokenizer:
        """`for_model` with the concrete type (it also has `count_request`)."""
        key = self._key(model, policy, upstream)
        found = self._by_model.get(key)
        if found is None:
            with self._lock:
                found = self._by_model.get(key) or self._build(*key)
                if len(self._by_model) > 4096:  # model names come from clients: stay bounded
                    self._by_model.clear()
                self._by_model[key] = found
        return found

    def observe_reported(
        self, model: str, counted: int, used: float, reported: int, upstream: str = ""
    ) -> float | None:
        """An answer's reported prompt tokens for a request to `upstream` the estimate
        counted as `counted` with factor `used`: the new factor for the model there when it
        moved (its tokenizer is rebuilt with it on next use), else None."""
        start = _tiktoken_for(base_model(model))[1]
        key = calibration_key(upstream, model)
        return self._rebuilt(key, self.calibration.observe(key, counted / used, reported, start))

    def observe_refused(
        self, model: str, counted: int, used: float, reported: int, upstream: str = ""
    ) -> float | None:
        """An upstream's count of a request to it, for `model`, that it refused as too long
        (the estimate counted `counted` with factor `used`): the model's factor there
        raised to it at once; the new factor when it moved, else None."""
        start = _tiktoken_for(base_model(model))[1]
        key = calibration_key(upstream, model)
        return self._rebuilt(key, self.calibration.refused(key, counted / used, reported, start))

    def learn_window(self, upstream: str, model: str, window: int) -> None:
        """`upstream` takes no more than `window` tokens (as the proxy counts them) for
        `model`: what its length refusal said, kept for the requests after."""
        key = calibration_key(upstream, model)
        if key in self._windows or len(self._windows) < MAX_LEARNED:
            self._windows[key] = min(window, self._windows.get(key, window))

    def learned_window(self, upstream: str, model: str) -> int | None:
        """The window `upstream` said it takes for `model`, if it said one."""
        return self._windows.get(calibration_key(upstream, model))

    def window_at(self, window: int, upstream: str, model: str) -> int:
        """`window` (the configured one) or, when `upstream` said it takes less for
        `model`, that."""
        learned = self._windows.get(calibration_key(upstream, model))
        return window if learned is None else min(window, learned)

    def install_calibration(self, key: str, samples: int, ratio: float) -> float | None:
        """The fleet's figures for a calibration key (from the shared state): the new
        factor if it moved."""
        model = key.partition(KEY_SEPARATOR)[2]  # an upstream has no tab; a name may
        start = _tiktoken_for(base_model(model))[1]
        return self._rebuilt(key, self.calibration.install(key, samples, ratio, start))

    def _rebuilt(self, key: str, moved: float | None) -> float | None:
        if moved is not None:  # the model's tokenizer is made again, with it, on next use
            with self._lock:
                for found in [k for k in self._by_model if calibration_key(k[2], k[0]) == key]:
                    del self._by_model[found]
        return moved

    @staticmethod
    def _key(model: str, policy: Policy, upstream: str) -> tuple[str, str | None, str]:
        configured = policy_model(model, policy)
        path = _tokenizer_path(configured.tokenizer, policy) if configured else None
        return model, path, upstream

    def _build(self, model: str, path: str | None, upstream: str) -> ChatTokenizer:
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
            if factor != 1.0:  # an estimate: the factor answers have shown, once there is one
                factor = self.calibration.factor(calibration_key(upstream, model)) or factor
        # o3/o4 replies are primed with one token less (tests/data/count_fixtures.json).
        priming = 2 if name.startswith(("o3", "o4")) else 3
        key = (source.name, factor, image_rule(name), priming)
        if key not in self._tokenizers:
            self._tokenizers[key] = ChatTokenizer(source, self._cache, key[2], factor, priming)
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
