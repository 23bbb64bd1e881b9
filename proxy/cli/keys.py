"""`context-proxy keys new|list|revoke`: proxy keys made, listed and revoked in the policy
files, which a running server reloads as it reloads any edit.

A new key is printed once, on stdout alone (a script can take it), once its hash is
written. An edit holds the folder's lock (one `keys` command at a time), is made in place
of the entry (key_edit.py, every comment kept), loaded as the whole policy set (an edit
that would make the set invalid is not written), and written over the text it was made
on only while the file still holds that text (key_files.py: a hand edit made meanwhile is
read again, never overwritten).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import secrets
import sys
from datetime import UTC, datetime
from pathlib import Path

from proxy.policy import PolicyError, PolicySet
from proxy.policy.key_edit import KeyEditError, KeyEntry, entries, with_key, without_key
from proxy.policy.key_files import FileChanged, folder_lock, write_policy_file
from proxy.policy.key_labels import checked_label, shown
from proxy.policy.load import TEAM_NAME, load_policy_text, load_policy_texts, read_policy_dir
from proxy.policy.model import hash_key

KEY_PREFIX = "cp-"
MIN_PREFIX = 8  # hex digits of a hash that name a key to revoke
ATTEMPTS = 5  # edits made again on a file edited by hand meanwhile, before giving up
LAST_KEY = (
    "with no key left a running proxy refuses every request until a key is added, and "
    "once restarted needs no key at all (open mode)"
)


def add_keys_arguments(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    keys = commands.add_parser("keys", help="make, list and revoke proxy keys")
    actions = keys.add_subparsers(dest="action", required=True)
    new = actions.add_parser("new", help="make a key for a team (printed once)")
    new.add_argument("--team", required=True, help="the team (its policy file is made if missing)")
    new.add_argument("--label", default="", help="what the key is for, shown by `keys list`")
    listed = actions.add_parser("list", help="every key: team, hash prefix, label, created")
    revoke = actions.add_parser("revoke", help="remove the key whose hash starts with PREFIX")
    revoke.add_argument("prefix", help="the start of its hash (8 hex digits at least)")
    revoke.add_argument(
        "--allow-open",
        action="store_true",
        help="revoke the last key too: " + LAST_KEY,
    )
    for parser in (new, listed, revoke):
        parser.add_argument("--policies", help="policy folder (default ./policies)")
    keys.set_defaults(func=keys_command)


def keys_command(args: argparse.Namespace) -> int:
    folder = Path(args.policies or os.environ.get("CONTEXT_PROXY_POLICIES") or "policies")
    try:
        if args.action == "list":
            return _list(folder)
        return _edit(folder, args)
    except (KeyEditError, PolicyError, OSError) as exc:
        print(f"context-proxy keys: {exc}", file=sys.stderr)
        return 1


def _edit(folder: Path, args: argparse.Namespace) -> int:
    """`new` or `revoke` under the folder's lock, made again on a file edited meanwhile."""
    if args.action == "new":
        label = checked_label(args.label)
        if not TEAM_NAME.fullmatch(args.team):
            raise KeyEditError(f"{args.team!r} is not a team name (letters, digits, '_', '-', '.')")
        folder.mkdir(parents=True, exist_ok=True)
    elif not folder.is_dir():
        raise KeyEditError(f"{folder}: policy folder does not exist")
    with folder_lock(folder):
        for _ in range(ATTEMPTS):
            with contextlib.suppress(FileChanged):
                if args.action == "new":
                    return _new(folder, args.team, label)
                return _revoke(folder, args.prefix, args.allow_open)
    raise KeyEditError(
        f"{folder}: the policy files kept changing while `keys` edited them; nothing was "
        "written, try again"
    )


def _texts(folder: Path) -> tuple[dict[str, str], PolicySet]:
    texts, problems = read_policy_dir(folder)
    if problems:
        raise PolicyError(problems)
    return texts, load_policy_texts(texts)  # the set as it stands must be valid before any edit


def _team_file(folder: Path, texts: dict[str, str], policies: PolicySet, team: str) -> Path:
    """The file of `team`'s policy, or the one to make for it: never a file that names
    another team (a key added there would authenticate as that team)."""
    for policy in policies.all():
        if policy.team == team and policy.source in texts:
            return Path(policy.source)
    for path in (folder / f"{team}.yaml", folder / f"{team}.yml"):
        if str(path) in texts or path.exists() or path.is_symlink():
            holds = next((p.team for p in policies.all() if p.source == str(path)), None)
            says = f"holds team {holds}" if holds else "exists"
            raise KeyEditError(
                f"{path} {says}, not team {team}: a key added there would not be {team}'s. "
                f"Name the team that file holds, or give the file `team: {team}` first"
            )
    return folder / f"{team}.yaml"


def _write(folder: Path, texts: dict[str, str], path: Path, text: str) -> None:
    """`text` as `path` once the whole set loads with it, over the text it was made on."""
    load_policy_texts({**texts, str(path): text})
    warning = write_policy_file(folder, path, text, texts.get(str(path)))
    if warning:
        print(f"context-proxy keys: warning: {warning}", file=sys.stderr)


def _new(folder: Path, team: str, label: str) -> int:
    texts, policies = _texts(folder)
    path = _team_file(folder, texts, policies, team)
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    entry = KeyEntry(hash_key(key), label, datetime.now(UTC).strftime("%Y-%m-%d"))
    text = with_key(texts.get(str(path), ""), entry, team)
    written = load_policy_text(text, str(path), path.stem)
    if written.team != team or entry.hash not in written.keys:  # what the key would open
        raise KeyEditError(f"{path} would not hold the key as team {team!r}'s; nothing written")
    _write(folder, texts, path, text)
    print(key)
    print(f"context-proxy keys: a key for team {team!r} added to {path}; it is shown only "
          "now, keep it safe.", file=sys.stderr)  # fmt: skip
    return 0


def _rows(texts: dict[str, str], policies: PolicySet) -> list[tuple[str, KeyEntry, str]]:
    rows: list[tuple[str, KeyEntry, str]] = []
    for policy in policies.all():
        if policy.source in texts:
            rows += [(policy.team, e, policy.source) for e in entries(texts[policy.source])]
    return rows


def _list(folder: Path) -> int:
    """One row per key: every cell read from a file is shown escaped (key_labels.py)."""
    rows = _rows(*_texts(folder)) if folder.is_dir() else []
    if isinstance(sys.stdout, io.TextIOWrapper):  # a terminal that cannot show a label's
        sys.stdout.reconfigure(errors="backslashreplace")  # characters gets escapes
    print(f"{'team':<20} {'key':<23} {'label':<24} {'created':<10} file")
    for team, entry, source in rows:
        cells = (shown(team, 20), shown(entry.hash[:23], 23), shown(entry.label, 24),
                 shown(entry.created or "-", 10, 32), shown(source, 0, 4096))  # fmt: skip
        print(" ".join(cells))
    return 0


def _revoke(folder: Path, prefix: str, allow_open: bool) -> int:
    wanted = prefix.lower().removeprefix("sha256:")
    if len(wanted) < MIN_PREFIX or any(c not in "0123456789abcdef" for c in wanted):
        raise KeyEditError(f"give at least {MIN_PREFIX} hex digits of the key's hash")
    texts, policies = _texts(folder)
    rows = _rows(texts, policies)
    found = [
        (t, e, s) for t, e, s in rows if e.hash.lower().removeprefix("sha256:").startswith(wanted)
    ]
    if not found:
        raise KeyEditError(f"no key's hash starts with {wanted}")
    if len(found) > 1:
        raise KeyEditError(f"{len(found)} keys' hashes start with {wanted}: give more digits")
    team, entry, source = found[0]
    last = len(rows) == 1
    if last and not allow_open:
        raise KeyEditError(f"it is the last key: {LAST_KEY}; pass --allow-open to revoke it anyway")
    _write(folder, texts, Path(source), without_key(texts[source], entry.hash.lower()))
    print(f"context-proxy keys: revoked {entry.hash[:23]} of team {team!r} in {source}",
          file=sys.stderr)  # fmt: skip
    if last:
        print(f"context-proxy keys: {LAST_KEY}", file=sys.stderr)
    return 0
