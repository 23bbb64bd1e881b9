"""A pytest plugin: the suite fails when a test or a command it runs changed the checkout.

A test that runs a command from the repository root (the README's first run, `keys new`
with its default `./policies`) could write into tracked files, and a suite that passes
would then leave keys or logs behind to be committed. The plugin hashes every tracked file
and lists the untracked, unignored ones when the session starts, and again when it ends:
any difference fails the run, naming the files. Editing the tree while the suite runs
trips it too.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_KEY = pytest.StashKey[dict[str, str]]()


def _git(root: Path, *argv: str) -> list[str] | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *argv], capture_output=True, check=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return [name for name in done.stdout.decode().split("\0") if name]


def tree_state(root: Path = ROOT) -> dict[str, str] | None:
    """Each tracked file's digest and each untracked, unignored file's name; None outside git."""
    tracked = _git(root, "ls-files", "-z")
    untracked = _git(root, "ls-files", "-z", "--others", "--exclude-standard")
    if tracked is None or untracked is None:
        return None
    state = {name: "untracked" for name in untracked}
    for name in tracked:
        path = root / name
        try:
            state[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            state[name] = "missing"  # deleted in the work tree: a later change still shows
    return state


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """What differs between two states, one line per file."""
    lines = []
    for name in sorted(before.keys() | after.keys()):
        was, now = before.get(name), after.get(name)
        if was == now:
            continue
        if now in (None, "missing"):
            lines.append(f"{name}: deleted")
        elif was in (None, "missing"):
            lines.append(f"{name}: written")
        else:
            lines.append(f"{name}: changed")
    return lines


def pytest_sessionstart(session: pytest.Session) -> None:
    state = tree_state()
    if state is not None:
        session.stash[_KEY] = state


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.stash.get(_KEY, None)
    after = tree_state() if before is not None else None
    if before is None or after is None:
        return
    changed = changes(before, after)
    if not changed:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = "the test run changed the checkout (tests write only to temporary folders):"
    if reporter is not None:
        reporter.write_line(message, red=True)
        for line in changed:
            reporter.write_line("  " + line, red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
