"""The `tools` policy keys: defaults, values, and FILE:LINE errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.policy.load import PolicyError, load_policy_dir, load_policy_text
from proxy.policy.model import ToolsPolicy

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_and_values() -> None:
    assert load_policy_text("", "p.yaml", "p").tools == ToolsPolicy()
    assert ToolsPolicy() == ToolsPolicy(keep_recent=3, clear=True, clear_min_tokens=100)
    text = "tools:\n  keep_recent: 1\n  clear: off\n  clear_min_tokens: 0\n  exclude: [read_file]\n"
    tools = load_policy_text(text, "p.yaml", "p").tools
    assert tools == ToolsPolicy(
        keep_recent=1, clear=False, clear_min_tokens=0, exclude=("read_file",)
    )


def test_bad_values_are_named_by_file_and_line() -> None:
    text = "budget: {ratio: 0.8}\ntools:\n  keep_recent: -1\n  exclude: bash\n  shred: true\n"
    with pytest.raises(PolicyError) as exc:
        load_policy_text(text, "team.yaml", "team")
    problems = exc.value.problems
    assert any(p.startswith("team.yaml:3: ") and "keep_recent" in p for p in problems)
    assert any(p.startswith("team.yaml:4: ") and "exclude must be a list" in p for p in problems)
    assert any(p.startswith("team.yaml:5: ") and "shred" in p for p in problems)
    with pytest.raises(PolicyError) as exc:
        load_policy_text("tools: {exclude: [bash, 3, '']}\n", "t.yaml", "t")
    assert len(exc.value.problems) == 2


def test_the_shipped_default_policy_lists_the_tools_keys() -> None:
    policy = load_policy_dir(ROOT / "policies").default
    assert policy.tools == ToolsPolicy()
    text = (ROOT / "policies" / "default.yaml").read_text()
    for key in ("keep_recent", "clear:", "clear_min_tokens", "exclude"):
        assert key in text
