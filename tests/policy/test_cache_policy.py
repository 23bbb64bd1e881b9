"""Policy: the `cache` block (cache-stable cuts), its defaults and FILE:LINE errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.policy.load import PolicyError, load_policy_dir, load_policy_text
from proxy.policy.model import CachePolicy, Policy

ROOT = Path(__file__).resolve().parents[2]


def problems_of(text: str) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        load_policy_text(text, "p.yaml", "p")
    return caught.value.problems


def test_defaults_and_empty_file() -> None:
    assert Policy().cache == CachePolicy(
        enabled=True,
        watermark=0.4,
        recall_share=1.0,
        recall_floor=2.0,
        chats=False,
    )
    assert load_policy_text("", "p.yaml", "p").cache == CachePolicy()


def test_cache_block_loads() -> None:
    text = "cache: {enabled: true, watermark: 0.8, recall_share: 0.1}\n"
    policy = load_policy_text(text, "p.yaml", "p")
    assert policy.cache == CachePolicy(enabled=True, watermark=0.8, recall_share=0.1)
    chats = load_policy_text("cache: {chats: true}\n", "p.yaml", "p").cache
    assert chats == CachePolicy(chats=True)
    assert any("chats" in p for p in problems_of("team: t\ncache: {chats: maybe}\n"))


def test_partial_block_keeps_other_defaults() -> None:
    policy = load_policy_text("cache:\n  enabled: true\n", "p.yaml", "p")
    assert policy.cache == CachePolicy(enabled=True)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("cache:\n  enabled: true\n  watermak: 0.7\n", 3, "watermak"),
        ("cache:\n  watermark: 1.5\n", 2, "watermark"),
        ("cache:\n  watermark: 0\n", 2, "watermark"),
        ("cache:\n  recall_share: -0.1\n", 2, "recall_share"),
        ("cache:\n  enabled: maybe\n", 2, "enabled"),
        ("cache: 3\n", 1, "cache"),
    ],
)
def test_bad_values_name_file_and_line(text: str, line: int, words: str) -> None:
    problems = problems_of(text)
    assert any(p.startswith(f"p.yaml:{line}:") and words in p for p in problems), problems


def test_watermark_of_one_is_an_error_at_its_line() -> None:
    # A step is (1 - watermark) of the budget: at 1 the cut could never move.
    problems = problems_of("team: t\ncache:\n  enabled: true\n  watermark: 1.0\n")
    assert problems == [
        "p.yaml:4: cache.watermark must be below 1 (the cut moves in steps of 1 - it)"
    ]


def test_default_policy_file_lists_the_cache_keys() -> None:
    text = (ROOT / "policies" / "default.yaml").read_text()
    for key in ("cache:", "enabled:", "watermark:", "recall_share:"):
        assert key in text
    policy = load_policy_dir(ROOT / "policies").default
    assert policy.cache.watermark == CachePolicy().watermark
    assert policy.cache.recall_share == CachePolicy().recall_share


def test_recall_floor_loads_and_is_checked() -> None:
    # recall_floor is a standout (a z-score, standout.py): any number >= 0.
    cache = load_policy_text("cache: {recall_floor: 0}\n", "p.yaml", "p").cache
    assert cache.recall_floor == 0
    problems = problems_of("team: t\ncache:\n  recall_floor: -1\n")
    assert any("p.yaml:3:" in p and "recall_floor" in p for p in problems)
    problems = problems_of("team: t\ncache:\n  enabled: true\n  recall_floor: high\n")
    assert any("p.yaml:4:" in p and "recall_floor" in p for p in problems)
    default = (ROOT / "policies" / "default.yaml").read_text()
    assert "recall_floor:" in default
