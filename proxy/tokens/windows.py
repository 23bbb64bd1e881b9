"""Tokens (windows): a model's context window from the policy, litellm's bundled map, the default.

The same read of the map gives each model's prices (proxy.tokens.prices).

Lookup order, first hit wins: the policy's `models` entry, litellm's bundled
`model_prices_and_context_window_backup.json` (`max_input_tokens`, else `max_tokens`; read
as plain JSON, litellm is never imported), the policy's `default_context_window`; else None
and the caller forwards the request untrimmed. Names are tried as sent, then without
provider prefixes (`openai/gpt-4o` -> `gpt-4o`, `openrouter/openai/x` -> `openai/x` -> `x`),
then without a date suffix (`gpt-4o-2024-08-06` -> `gpt-4o`, `claude-x@20240620` -> `claude-x`).
"""

from __future__ import annotations

import functools
import importlib.util
import re
import threading
from collections.abc import Mapping
from pathlib import Path

import orjson

from proxy.policy import ModelPolicy, Policy
from proxy.tokens.prices import Prices, entry_prices

_DATE_SUFFIX = re.compile(r"[-@](?:\d{4}-\d{2}-\d{2}|\d{8}|\d{4})$")
REGISTRY_FILE = "model_prices_and_context_window_backup.json"
# Prices are looked up once per model name and kept; clients choose the names, so at most
# this many are kept (a name beyond it is looked up again each time, still a few dict gets).
MAX_PRICED_NAMES = 1024


def litellm_dir() -> Path | None:
    """litellm's package folder, found without importing it (importing costs ~2.6 s)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def model_names(model: str) -> list[str]:
    """Names to try for `model`, most specific first: as sent, prefixes dropped, undated."""
    return list(_names(model))


# Looked up twice per request (the window, the metrics label): made once per model name.
# Bounded, since clients choose the names (at most 256 characters each, chat_guards).
@functools.lru_cache(maxsize=512)
def _names(model: str) -> tuple[str, ...]:
    exact: list[str] = []
    name = model.strip()
    while name:
        exact.append(name)
        if name.lower() != name:
            exact.append(name.lower())
        _, slash, rest = name.partition("/")
        name = rest if slash else ""
    undated = [_DATE_SUFFIX.sub("", n) for n in exact]
    names: list[str] = []
    for n in exact + undated:
        if n and n not in names:
            names.append(n)
    return tuple(names)


def base_model(model: str) -> str:
    """The lowercase model name without provider prefixes: `azure/GPT-4o` -> `gpt-4o`."""
    return model.strip().lower().rsplit("/", 1)[-1]


def policy_model(model: str, policy: Policy) -> ModelPolicy | None:
    """The policy's `models` entry for `model`, by the same name rules as the registry."""
    if not policy.models:
        return None
    for name in _names(model):
        found = policy.models.get(name)
        if found is not None:
            return found
    return None


class ContextWindows:
    """Context windows and prices by model; the bundled map is read lazily, once, and kept."""

    def __init__(self, registry_path: Path | None = None) -> None:
        if registry_path is None:
            folder = litellm_dir()
            registry_path = folder / REGISTRY_FILE if folder else None
        self._path = registry_path
        self._registry: Mapping[str, int] | None = None
        self._prices: Mapping[str, Prices] = {}
        self._tooled: frozenset[str] = frozenset()  # names the map says take tools
        self._priced: dict[str, Prices | None] = {}  # by the name as sent
        self._lock = threading.Lock()

    def lookup(self, model: str, policy: Policy) -> int | None:
        """The window for `model` under `policy`, or None when it is known nowhere."""
        configured = policy_model(model, policy)
        if configured is not None and configured.context_window:
            return configured.context_window
        return self.registry_window(model) or policy.default_context_window

    def registry_window(self, model: str) -> int | None:
        """The window litellm's bundled map gives `model`, or None."""
        registry = self._load()
        for name in _names(model):
            window = registry.get(name)
            if window is not None:
                return window
        return None

    def policy_prices(self, model: str, policy: Policy | None) -> Prices | None:
        """The price the policy gives `model` (`models.<name>.input_usd_per_mtok`...), else
        the bundled map's; None when neither prices it."""
        configured = policy_model(model, policy) if policy is not None else None
        if configured is not None and configured.input_usd_per_mtok is not None:
            per_token = configured.input_usd_per_mtok / 1e6
            cached = configured.cached_usd_per_mtok
            return Prices(
                per_token,
                per_token if cached is None else cached / 1e6,
                (configured.output_usd_per_mtok or 0.0) / 1e6,
            )
        return self.prices(model)

    def takes_tools(self, model: str) -> bool:
        """Whether litellm's bundled map says `model` takes tools (function calling)."""
        self._load()
        return any(name in self._tooled for name in _names(model))

    def registry_names(self) -> list[str]:
        """Every model name the bundled map knows (for suggestions: not the request path)."""
        return list(self._load())

    def prices(self, model: str) -> Prices | None:
        """The prices litellm's bundled map gives `model` (same name rules), or None."""
        try:
            return self._priced[model]
        except KeyError:
            pass
        self._load()
        found = next((p for n in _names(model) if (p := self._prices.get(n)) is not None), None)
        if len(self._priced) < MAX_PRICED_NAMES:
            self._priced[model] = found
        return found

    def _load(self) -> Mapping[str, int]:
        if self._registry is None:
            with self._lock:
                if self._registry is None:
                    # Prices first: a reader that sees the windows must see the prices too.
                    windows, self._prices, self._tooled = _read_registry(self._path)
                    self._registry = windows
        return self._registry

    def __repr__(self) -> str:
        return f"ContextWindows(registry={str(self._path)!r})"


def _read_registry(
    path: Path | None,
) -> tuple[dict[str, int], dict[str, Prices], frozenset[str]]:
    """The map's windows and prices by model name (also lowercased), and the names of the
    models that take tools, in one read."""
    if path is None or not path.is_file():
        return {}, {}, frozenset()
    raw = orjson.loads(path.read_bytes())
    windows: dict[str, int] = {}
    prices: dict[str, Prices] = {}
    tooled: set[str] = set()
    for name, entry in raw.items() if isinstance(raw, dict) else ():
        if not isinstance(entry, dict):
            continue
        window = _count(entry.get("max_input_tokens")) or _count(entry.get("max_tokens"))
        if window:
            windows[name] = window
            windows.setdefault(name.lower(), window)
        price = entry_prices(entry)
        if price is not None:
            prices[name] = price
            prices.setdefault(name.lower(), price)
        if entry.get("supports_function_calling") is True:
            tooled.update((name, name.lower()))
    return windows, prices, frozenset(tooled)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
