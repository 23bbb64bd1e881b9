"""Context windows: policy first, then litellm's bundled model map, then the policy default."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import orjson
import pytest

from proxy.policy.model import ModelPolicy, Policy
from proxy.tokens.windows import ContextWindows, base_model, model_names, policy_model


@pytest.fixture(scope="module")
def windows() -> ContextWindows:
    return ContextWindows()


def test_bundled_map_known_models(windows: ContextWindows) -> None:
    # Values from litellm's model_prices_and_context_window_backup.json (max_input_tokens).
    assert windows.lookup("gpt-4o", Policy()) == 128_000
    assert windows.lookup("gpt-4", Policy()) == 8192
    assert windows.lookup("gpt-3.5-turbo", Policy()) == 16_385


@pytest.mark.parametrize(
    "model",
    [
        "openai/gpt-4o",
        "azure/gpt-4o",
        "openrouter/openai/gpt-4o",
        "GPT-4o",
        "gpt-4o-2099-01-01",
        "openai/gpt-4o-2099-12-31",
    ],
)
def test_prefixes_and_dated_variants_resolve(windows: ContextWindows, model: str) -> None:
    assert windows.lookup(model, Policy()) == 128_000


def test_dated_variant_listed_itself_wins(tmp_path: Path) -> None:
    registry = tmp_path / "map.json"
    registry.write_bytes(
        orjson.dumps(
            {
                "sample_spec": {"max_input_tokens": "text", "max_tokens": "text"},
                "m": {"max_input_tokens": 1000, "max_tokens": 10},
                "m-2024-01-01": {"max_input_tokens": 2000},
                "only-max-tokens": {"max_tokens": 4096},
                "nothing": {"max_input_tokens": None},
                "flag": {"max_input_tokens": True},
            }
        )
    )
    windows = ContextWindows(registry)
    assert windows.registry_window("m-2024-01-01") == 2000
    assert windows.registry_window("m-2025-01-01") == 1000
    assert windows.registry_window("only-max-tokens") == 4096
    assert windows.registry_window("nothing") is None
    assert windows.registry_window("flag") is None
    assert windows.registry_window("sample_spec") is None


def test_policy_models_first_then_registry_then_default(windows: ContextWindows) -> None:
    policy = Policy(
        models=MappingProxyType(
            {
                "gpt-4o-mini": ModelPolicy(context_window=8192),
                "my-llama": ModelPolicy(tokenizer="t.json"),
            }
        ),
        default_context_window=32_000,
    )
    assert windows.lookup("gpt-4o-mini", policy) == 8192
    assert windows.lookup("openai/gpt-4o-mini", policy) == 8192  # same name rules as the registry
    assert windows.lookup("gpt-4o", policy) == 128_000
    assert windows.lookup("my-llama", policy) == 32_000  # listed, but without a window
    assert windows.lookup("never-heard-of-it", policy) == 32_000
    assert windows.lookup("never-heard-of-it", Policy()) is None


def test_missing_registry_file_is_empty(tmp_path: Path) -> None:
    windows = ContextWindows(tmp_path / "absent.json")
    assert windows.lookup("gpt-4o", Policy(default_context_window=1234)) == 1234


def test_registry_is_read_once(tmp_path: Path) -> None:
    registry = tmp_path / "map.json"
    registry.write_bytes(orjson.dumps({"m": {"max_input_tokens": 1000}}))
    windows = ContextWindows(registry)
    assert windows.registry_window("m") == 1000
    registry.write_bytes(orjson.dumps({"m": {"max_input_tokens": 5}}))
    assert windows.registry_window("m") == 1000


def test_name_rules() -> None:
    assert model_names("openrouter/openai/gpt-4o-2024-08-06") == [
        "openrouter/openai/gpt-4o-2024-08-06",
        "openai/gpt-4o-2024-08-06",
        "gpt-4o-2024-08-06",
        "openrouter/openai/gpt-4o",
        "openai/gpt-4o",
        "gpt-4o",
    ]
    assert model_names("claude-3-5-sonnet@20240620")[-1] == "claude-3-5-sonnet"
    assert model_names("gpt-4-0613")[-1] == "gpt-4"
    assert base_model("Azure/GPT-4o") == "gpt-4o"
    assert policy_model("x", Policy()) is None
