"""What `keys` writes, and where: only the named team's file, as the folder's other files
are (mode, owner), never through a symbolic link, never over a hand edit made meanwhile,
nothing on a read-only folder; and `list` prints one row per key whatever the labels."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import proxy.cli.keys as keys_cli
from proxy.cli.main import main
from proxy.policy import key_files
from proxy.policy.load import load_policy_dir
from proxy.policy.model import hash_key
from tests.cli.test_cli import ROOT
from tests.cli.test_keys import HANDWRITTEN, keys

FINANCE = "team: finance   # ops.yaml holds finance's policy\nquotas: {daily_tokens: 900}\n"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A policy folder with the research team's hand-written file."""
    made = tmp_path / "policies"
    made.mkdir()
    (made / "research.yaml").write_text(HANDWRITTEN)
    return made


@pytest.mark.parametrize("name", ["ops.yaml", "ops.yml"])
def test_a_key_for_a_team_never_lands_in_a_file_of_another_team(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / name).write_text(FINANCE)
    code, out, err = keys(folder, "new", "--team", "ops")
    assert code == 1 and out == "" and "finance" in err and name in err
    assert (folder / name).read_text() == FINANCE
    assert sorted(p.name for p in folder.glob("*.y*ml")) == [name]
    assert load_policy_dir(folder).open_mode
    code, out, _ = keys(folder, "new", "--team", "finance")  # the file's own team
    assert code == 0 and load_policy_dir(folder).for_key(out.strip()).team == "finance"  # type: ignore[union-attr]


def mode_and_owner(path: Path) -> tuple[int, int, int]:
    found = path.lstat()
    return stat.S_IMODE(found.st_mode), found.st_uid, found.st_gid


def test_new_team_files_take_the_mode_and_owner_of_the_folder_s_files(tmp_path: Path) -> None:
    """A server running as another user reads the folder's files by their group or owner:
    a file made 0600 and owned by whoever ran `keys` is one it cannot read."""
    folder = tmp_path / "policies"
    folder.mkdir()
    for name in ("default.yaml", "research.yaml"):
        (folder / name).write_text(HANDWRITTEN if name == "research.yaml" else "")
        (folder / name).chmod(0o640)
    root = os.geteuid() == 0
    if root:  # another user's files, as a service account's would be
        for name in ("default.yaml", "research.yaml"):
            os.chown(folder / name, 4321, 8765)
    like = mode_and_owner(folder / "default.yaml")
    code, _, err = keys(folder, "new", "--team", "ops")
    assert code == 0
    assert mode_and_owner(folder / "ops.yaml") == like and not err.count("warning")
    code, _, err = keys(folder, "new", "--team", "research")  # a file replaced keeps its own
    assert code == 0 and mode_and_owner(folder / "research.yaml") == like
    assert stat.S_IMODE((folder / "ops.yaml").stat().st_mode) == 0o640


def test_an_owner_this_user_may_not_give_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "default.yaml").write_text("")
    (folder / "default.yaml").chmod(0o640)

    def not_allowed(*_: Any) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "fchown", not_allowed)
    monkeypatch.setattr(key_files, "_likeness", lambda _: (0o640, 4321, 8765))
    assert main(["keys", "new", "--team", "ops", "--policies", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("cp-") and "warning" in err and "uid 4321, gid 8765" in err
    assert stat.S_IMODE((folder / "ops.yaml").stat().st_mode) == 0o640


def test_a_team_file_in_an_empty_folder_is_made_as_any_new_file(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    os.umask(umask)
    code, _, _ = keys(tmp_path / "policies", "new", "--team", "ops")
    assert code == 0
    assert stat.S_IMODE((tmp_path / "policies" / "ops.yaml").stat().st_mode) == 0o666 & ~umask


def test_a_symlinked_policy_file_is_never_replaced_by_a_copy(tmp_path: Path) -> None:
    folder, elsewhere = tmp_path / "policies", tmp_path / "checkout"
    folder.mkdir()
    elsewhere.mkdir()
    (elsewhere / "research.yaml").write_text(HANDWRITTEN)
    (folder / "research.yaml").symlink_to(elsewhere / "research.yaml")
    for argv in (("new", "--team", "research"), ("revoke", "9f86d081", "--allow-open")):
        code, out, err = keys(folder, *argv)
        assert code == 1 and out == "" and "symbolic link" in err
        assert (folder / "research.yaml").is_symlink()
        assert (elsewhere / "research.yaml").read_text() == HANDWRITTEN
    code, out, _ = keys(folder, "list")
    assert code == 0 and "sha256:9f86d081884c7d65" in out


def test_a_read_only_folder_is_named_and_nothing_is_printed_or_written(
    folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_open = os.open

    def read_only(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        writes = flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
        if writes and str(path).startswith(str(folder)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    for argv in (["new", "--team", "research"], ["revoke", "9f86d081", "--allow-open"]):
        assert main(["keys", *argv, "--policies", str(folder)]) == 1
        out, err = capsys.readouterr()
        assert out == "" and "cannot be written (Read-only file system)" in err
    assert main(["keys", "list", "--policies", str(folder)]) == 0  # reading needs no write
    assert "9f86d081884c7d65" in capsys.readouterr().out
    assert [p.name for p in folder.iterdir()] == ["research.yaml"]
    assert (folder / "research.yaml").read_text() == HANDWRITTEN


def edit_by_hand_before_writes(
    monkeypatch: pytest.MonkeyPatch, path: Path, times: int
) -> list[str]:
    """A person saving `path` just as `keys` is about to write its edit, `times` times."""
    check = keys_cli.load_policy_texts
    saved: list[str] = []

    def checked_then_edited(texts: dict[str, str], *rest: Any) -> Any:
        result = check(texts, *rest)
        if len(saved) < times and texts.get(str(path)) != path.read_text():
            saved.append(path.read_text() + f"# reviewed {len(saved) + 1}\n")
            path.write_text(saved[-1])
        return result

    monkeypatch.setattr(keys_cli, "load_policy_texts", checked_then_edited)
    return saved


def test_a_hand_edit_made_during_a_command_is_kept_with_the_command_s(
    folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = folder / "research.yaml"
    saved = edit_by_hand_before_writes(monkeypatch, path, times=1)
    assert main(["keys", "new", "--team", "research", "--policies", str(folder)]) == 0
    key = capsys.readouterr().out.strip()
    policy = load_policy_dir(folder).by_team("research")
    assert len(saved) == 1 and path.read_text().endswith("# reviewed 1\n")
    assert hash_key(key) in policy.keys and len(policy.keys) == 2


def test_a_file_that_keeps_changing_is_left_to_its_editor(
    folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = folder / "research.yaml"
    saved = edit_by_hand_before_writes(monkeypatch, path, times=100)
    assert main(["keys", "new", "--team", "research", "--policies", str(folder)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "kept changing" in err and "nothing was written" in err
    assert path.read_text() == saved[-1] and len(saved) == keys_cli.ATTEMPTS


def test_list_prints_one_row_per_key_whatever_the_labels(tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    code, _, err = keys(folder, "new", "--team", "research", "--label", "x\nresearch  forged")
    assert code == 1 and "one line of printable text" in err and not folder.exists()
    for label in ("a😀b", "ci runner"):
        assert keys(folder, "new", "--team", "research", "--label", label)[0] == 0
    with (folder / "research.yaml").open("a") as file:  # labels written by hand
        for n, label in enumerate(["x\\nresearch  sha256:forged", "\\u202eevil", "z" * 5000]):
            file.write(f'  - {{hash: "sha256:{n:064d}", label: "{label}"}}\n')
        file.write('  - {hash: "sha256:' + "f" * 64 + '", label: "a\\ud83d\\ude00b"}\n')
    code, out, err = keys(folder, "list")
    rows = out.splitlines()
    assert code == 0 and not err and len(rows) == 1 + 6
    assert all(row.startswith("research ") for row in rows[1:])
    assert sum("a😀b" in row for row in rows) == 2 and "\\x0a" in out and "\\u202e" in out
    assert max(len(row) for row in rows) < 400
    ascii_only = {**os.environ, "PYTHONIOENCODING": "ascii"}  # a terminal without emoji
    command = [sys.executable, "-m", "proxy", "keys", "list", "--policies", str(folder)]
    done = subprocess.run(command, capture_output=True, env=ascii_only, cwd=ROOT, timeout=60)
    assert done.returncode == 0 and len(done.stdout.decode("ascii").splitlines()) == 1 + 6
    assert "a\\U0001f600b" in done.stdout.decode()


def test_a_command_that_holds_the_folder_too_long_is_named_not_waited_on_forever(
    folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(key_files, "LOCK_WAIT_S", 0.3)
    with key_files.folder_lock(folder):  # another `keys`, stopped mid-edit (Ctrl-Z)
        assert main(["keys", "new", "--team", "research", "--policies", str(folder)]) == 1
        out, err = capsys.readouterr()
        assert out == "" and "another `context-proxy keys`" in err
    assert (folder / "research.yaml").read_text() == HANDWRITTEN
    assert main(["keys", "new", "--team", "research", "--policies", str(folder)]) == 0


def test_a_link_put_where_the_lock_goes_is_never_followed(tmp_path: Path) -> None:
    folder, target = tmp_path / "policies", tmp_path / "precious"
    folder.mkdir()
    target.write_text("kept")
    (folder / ".keys.lock").symlink_to(target)
    code, out, err = keys(folder, "new", "--team", "research")
    assert code == 1 and out == "" and ".keys.lock" in err
    assert target.read_text() == "kept" and sorted(p.name for p in folder.iterdir()) == [
        ".keys.lock"
    ]
