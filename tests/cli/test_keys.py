"""`context-proxy keys new|list|revoke`: a key printed once and only its hash stored, the
policy file's own text kept byte for byte around the edit, a running server taking the
change as it takes any edit, and nothing half-done or opened by mistake."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from proxy.policy.load import load_policy_dir
from proxy.policy.model import hash_key
from tests.cli.test_cli import run_cli
from tests.fake_upstream import FakeUpstream

HANDWRITTEN = """# The research team: its key, its budget.
team: research   # as it shows in the usage log
keys:
  - "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"   # alice's laptop
budget: {ratio: 0.5}   # half the window

# Quotas, reviewed monthly
quotas:
  daily_tokens: 5000000
"""
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


def keys(folder: Path, *argv: str) -> tuple[int, str, str]:
    done = run_cli("keys", *argv, "--policies", str(folder))
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def until(condition: Any, what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.2)


def test_a_new_key_is_printed_once_and_its_hash_added_with_the_file_kept(tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "research.yaml").write_text(HANDWRITTEN)
    code, out, err = keys(folder, "new", "--team", "research", "--label", "ci runner")
    key = out.strip()
    assert code == 0 and key.startswith("cp-") and len(key) > 40
    assert "shown only now" in err and key not in err
    text = (folder / "research.yaml").read_text()
    assert key not in text and hash_key(key) in text
    added = [line for line in text.splitlines() if line not in HANDWRITTEN.splitlines()]
    assert len(added) == 1 and added[0].startswith("  - {hash: ")  # one line, the list's indent
    assert text.replace(added[0] + "\n", "") == HANDWRITTEN  # every other byte as it was
    policy = load_policy_dir(folder).by_team("research")
    assert hash_key(key) in policy.keys and len(policy.keys) == 2
    code, out, _ = keys(folder, "list")
    assert code == 0 and "ci runner" in out and hash_key(key)[:23] in out and key not in out


def test_a_team_without_a_file_gets_one_and_flow_lists_grow_in_place(tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    code, out, _ = keys(folder, "new", "--team", "ops")
    assert code == 0
    assert hash_key(out.strip()) in load_policy_dir(folder).by_team("ops").keys
    flow = 'team: infra\nkeys: ["sha256:' + "a" * 64 + '"]  # ops\nbudget: {ratio: 0.5}\n'
    (folder / "infra.yaml").write_text(flow)
    code, out, _ = keys(folder, "new", "--team", "infra")
    text = (folder / "infra.yaml").read_text()
    assert text.startswith('team: infra\nkeys: ["sha256:' + "a" * 64 + '", {hash: ')
    assert text.endswith("}]  # ops\nbudget: {ratio: 0.5}\n")
    assert len(load_policy_dir(folder).by_team("infra").keys) == 2


def test_revoking_needs_one_match_and_never_opens_the_proxy_by_mistake(tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "research.yaml").write_text(HANDWRITTEN)
    code, _, err = keys(folder, "revoke", "9f86")
    assert code == 1 and "8 hex digits" in err
    code, _, err = keys(folder, "revoke", "9f86d081")
    assert code == 1 and "last key" in err and "--allow-open" in err
    assert (folder / "research.yaml").read_text() == HANDWRITTEN
    _, out, _ = keys(folder, "new", "--team", "research")
    code, _, _ = keys(folder, "revoke", "sha256:9f86d081884c")
    text = (folder / "research.yaml").read_text()
    assert code == 0 and "9f86d081" not in text and "alice's laptop" not in text
    assert (
        "# Quotas, reviewed monthly" in text and "budget: {ratio: 0.5}   # half the window" in text
    )
    assert load_policy_dir(folder).by_team("research").keys == (hash_key(out.strip()),)
    code, _, err = keys(folder, "revoke", "0123456789abcdef")
    assert code == 1 and "no key" in err


def test_a_bad_team_name_or_a_broken_folder_changes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    code, _, err = keys(folder, "new", "--team", "../etc")
    assert code == 1 and "not a team name" in err
    (folder / "broken.yaml").write_text("team: [unclosed\n")
    code, _, err = keys(folder, "new", "--team", "research")
    assert code == 1 and "broken.yaml" in err
    assert sorted(p.name for p in folder.iterdir()) == [
        ".keys.lock",
        "broken.yaml",
    ]  # the lock stays


def test_a_running_server_takes_new_and_revoked_keys(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    (policies_dir / "research.yaml").write_text(HANDWRITTEN)
    proxy = start_proxy(watch_policies=True)
    _, out, _ = keys(policies_dir, "new", "--team", "research")
    key = out.strip()

    def status(k: str) -> int:
        headers = {"authorization": f"Bearer {k}"}
        return httpx.post(
            proxy.url + "/v1/chat/completions", headers=headers, json=CHAT
        ).status_code

    until(lambda: status(key) == 200, "the new key admitted")
    keys(policies_dir, "revoke", hash_key(key)[7:20])
    until(lambda: status(key) == 401, "the revoked key refused")
