"""The guard that fails the suite when a test changed the checkout sees each kind of change."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.tree_guard import changes, tree_state


def git(root: Path, *argv: str) -> None:
    subprocess.run(["git", "-C", str(root), *argv], check=True, capture_output=True)


def test_an_edit_a_deletion_and_a_new_file_are_seen_and_ignored_files_are_not(
    tmp_path: Path,
) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text("usage.jsonl\n")
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "default.yaml").write_text("budget: {ratio: 0.8}\n")
    (tmp_path / "README.md").write_text("read me\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    before = tree_state(tmp_path)
    assert before is not None and changes(before, before) == []
    (tmp_path / "usage.jsonl").write_text("{}\n")  # ignored: a local run's log
    assert changes(before, tree_state(tmp_path) or {}) == []
    (tmp_path / "policies" / "default.yaml").write_text("keys: ['sha256:x']\n")
    (tmp_path / "README.md").unlink()
    (tmp_path / "policies" / "research.yaml").write_text("team: research\n")
    assert changes(before, tree_state(tmp_path) or {}) == [
        "README.md: deleted",
        "policies/default.yaml: changed",
        "policies/research.yaml: written",
    ]


def test_outside_a_git_checkout_there_is_nothing_to_guard(tmp_path: Path) -> None:
    assert tree_state(tmp_path / "nowhere") is None
