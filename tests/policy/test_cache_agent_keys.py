"""Cache mode's agent keys (planner/cache/agent.py): loaded, checked at their line, listed."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.policy import PolicyError
from proxy.policy.load import load_policy_dir, load_policy_text
from proxy.policy.model import CachePolicy

ROOT = Path(__file__).resolve().parents[2]


def problems_of(text: str) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        load_policy_text(text, "p.yaml", "p")
    return caught.value.problems


def test_agent_keys_load() -> None:
    text = "cache: {agent_watermark: 0.6, agent_recall_share: 0}\n"
    cache = load_policy_text(text, "p.yaml", "p").cache
    assert (cache.agent_watermark, cache.agent_recall_share) == (0.6, 0)
    assert cache.enabled  # on by default


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("team: t\ncache:\n  agent_watermark: 1.0\n", 3, "agent_watermark"),
        ("team: t\ncache:\n  agent_watermark: 0\n", 3, "agent_watermark"),
        ("team: t\ncache:\n  enabled: true\n  agent_recall_share: 1.5\n", 4, "agent_recall_share"),
        ("team: t\ncache:\n  agent_recall_share: lots\n", 3, "agent_recall_share"),
    ],
)
def test_bad_agent_values_name_file_and_line(text: str, line: int, words: str) -> None:
    problems = problems_of(text)
    assert any(p.startswith(f"p.yaml:{line}:") and words in p for p in problems), problems


def test_default_policy_file_lists_the_agent_keys_with_their_defaults() -> None:
    text = (ROOT / "policies" / "default.yaml").read_text()
    assert "agent_watermark:" in text and "agent_recall_share:" in text
    assert load_policy_dir(ROOT / "policies").default.cache == CachePolicy()
