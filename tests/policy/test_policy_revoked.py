"""Every key revoked while the server runs: the revocation is in force at the next reload,
and the proxy is closed (nobody admitted), never opened, until a key is added or it restarts."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from proxy.errors import Unauthorized
from proxy.policy.model import hash_key
from proxy.policy.store import PolicyStore
from proxy.server.pipeline.auth import resolve_policy

TEAM = f'team: research\nkeys: ["{hash_key("k1")}"]   # the laptop\nbudget: {{ratio: 0.5}}\n'
REVOKED = "team: research\nkeys: []   # the laptop\nbudget: {ratio: 0.5}\n"


@pytest.fixture
def store(tmp_path: Path) -> PolicyStore:
    (tmp_path / "default.yaml").write_text("budget: {ratio: 0.7}\n")
    (tmp_path / "research.yaml").write_text(TEAM)
    loaded = PolicyStore.load(str(tmp_path))
    assert not loaded.current.open_mode
    return loaded


def refused(store: PolicyStore, key: str | None) -> bool:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    try:
        resolve_policy(store.current, headers)
    except Unauthorized:
        return True
    return False


def test_keys_emptied_on_purpose_revoke_every_key_and_open_nothing(
    store: PolicyStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "research.yaml").write_text(REVOKED)
    with caplog.at_level(logging.WARNING, logger="context_proxy.policy"):
        assert store.reload() is True
    assert store.current.closed and not store.current.open_mode
    assert refused(store, "k1") and refused(store, None) and refused(store, "anything")
    assert "every request is refused" in caplog.text and "sha256:" not in caplog.text
    # The rest of the set is taken as it is.
    assert store.current.by_team("research").budget.ratio == 0.5
    (tmp_path / "default.yaml").write_text("budget: {ratio: 0.6}\n")
    assert store.reload() is True and store.current.closed
    assert store.current.default.budget.ratio == 0.6


def test_a_key_added_after_all_were_revoked_is_admitted_alone(
    store: PolicyStore, tmp_path: Path
) -> None:
    (tmp_path / "research.yaml").write_text(REVOKED)
    assert store.reload() and store.current.closed
    (tmp_path / "research.yaml").write_text(TEAM.replace(hash_key("k1"), hash_key("k2")))
    assert store.reload() and not store.current.closed
    assert not refused(store, "k2") and refused(store, "k1") and refused(store, None)


def test_a_file_that_loses_its_keys_line_is_still_refused(
    store: PolicyStore, tmp_path: Path
) -> None:
    """Without `keys: []` the file may be a save caught half-done: the last set stays."""
    (tmp_path / "research.yaml").write_text("team: research\nbudget: {ratio: 0.5}\n")
    assert store.reload() is False and not refused(store, "k1")
    (tmp_path / "research.yaml").write_text("team: research\nkeys:\nbudget: {ratio: 0.5}\n")
    assert store.reload() is False and not refused(store, "k1")


def test_only_deleting_the_files_that_held_keys_opens_a_running_proxy(
    store: PolicyStore, tmp_path: Path
) -> None:
    (tmp_path / "research.yaml").write_text(REVOKED)
    assert store.reload() and store.current.closed
    # Another file that says `keys: []`, and never held keys, opens nothing either.
    (tmp_path / "ops.yaml").write_text("team: ops\nkeys: []\n")
    assert store.reload() and store.current.closed
    (tmp_path / "research.yaml").unlink()
    assert store.reload() and store.current.open_mode and not store.current.closed
    assert not refused(store, None)


def test_keyed_files_emptied_one_by_one_close_the_proxy_only_with_the_last(
    store: PolicyStore, tmp_path: Path
) -> None:
    ops = f'team: ops\nkeys: ["{hash_key("k3")}"]\n'
    (tmp_path / "ops.yaml").write_text(ops)
    assert store.reload() and not refused(store, "k3")
    (tmp_path / "ops.yaml").write_text("team: ops\nkeys: []\n")
    assert store.reload() and not store.current.closed and refused(store, "k3")
    assert not refused(store, "k1")
    (tmp_path / "research.yaml").write_text(REVOKED)
    assert store.reload() and store.current.closed and refused(store, "k1")
    # A restart reads the folder afresh: no keys anywhere is open mode, on purpose.
    assert PolicyStore.load(str(tmp_path)).current.open_mode
