"""`keys` commands run at once, as real processes: none loses another's edit (every printed
key stored, a revoke that said "revoked" never undone) and `list` always reads a whole set."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from proxy.policy.load import load_policy_dir
from proxy.policy.model import hash_key
from tests.cli.test_cli import ROOT

ROUNDS = 3
# Other teams' files make each command read and check for a while, so the commands'
# reads and writes overlap the way a slow disk or a big folder would have them.
OTHER_TEAMS = 80


def folder_with_teams(tmp_path: Path, round_: int, research: str = "") -> Path:
    folder = tmp_path / f"round{round_}"
    folder.mkdir()
    for n in range(OTHER_TEAMS):
        (folder / f"team{n}.yaml").write_text(f"team: team{n}\nbudget: {{ratio: 0.5}}\n")
    if research:
        (folder / "research.yaml").write_text(research)
    return folder


def start(folder: Path, *argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "proxy", "keys", *argv, "--policies", str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )


def finish(process: subprocess.Popen[bytes]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=120)
    return process.returncode, out.decode(), err.decode()


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_six_keys_new_at_once_never_lose_a_printed_key(tmp_path: Path, round_: int) -> None:
    folder = folder_with_teams(tmp_path, round_)
    done = [finish(p) for p in [start(folder, "new", "--team", "research") for _ in range(6)]]
    printed = [out.strip() for code, out, _ in done if code == 0]
    assert len(printed) == 6, [err for _, _, err in done]
    stored = load_policy_dir(folder).by_team("research").keys
    assert sorted(stored) == sorted(hash_key(k) for k in printed)
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith("team")) == [
        ".keys.lock",
        "research.yaml",
    ]  # no temporary file left behind


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_a_revoke_that_said_revoked_is_never_undone_by_a_new_key(
    tmp_path: Path, round_: int
) -> None:
    kept, revoked = hash_key("kept"), hash_key("revoked")
    folder = folder_with_teams(tmp_path, round_, f'team: research\nkeys: ["{kept}", "{revoked}"]\n')
    news = [start(folder, "new", "--team", "research") for _ in range(3)]
    revoke = start(folder, "revoke", revoked[7:23])
    more = [start(folder, "new", "--team", "research") for _ in range(3)]
    lists = [start(folder, "list") for _ in range(2)]
    code, _, err = finish(revoke)
    assert code == 0 and "revoked" in err
    printed = [finish(p)[1].strip() for p in [*news, *more]]
    stored = load_policy_dir(folder).by_team("research").keys
    assert revoked not in stored
    assert sorted(stored) == sorted([kept, *(hash_key(k) for k in printed)])
    for listing in lists:  # a whole set each time: the kept key, a row per key, no error
        code, out, err = finish(listing)
        assert code == 0 and not err and kept[:23] in out
        assert 2 <= len(out.splitlines()) <= 1 + 1 + 1 + 6
