"""`context-proxy keys new|list|revoke`: proxy keys made, listed and revoked in the policy
files, which a running server reloads as it reloads any edit.

A new key is printed once, on stdout alone (a script can take it), and only its hash is
written. Files are edited in place of the entry (key_edit.py), every comment kept, written
to a new file renamed over the old (a reload never reads half a file), and loaded as the
whole policy set before that: an edit that would make the set invalid is not written.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from proxy.policy import PolicyError
from proxy.policy.key_edit import KeyEditError, KeyEntry, entries, with_key, without_key
from proxy.policy.load import load_policy_texts, read_policy_dir
from proxy.policy.model import hash_key

KEY_PREFIX = "cp-"
MIN_PREFIX = 8  # hex digits of a hash that name a key to revoke


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
        help="revoke the last key even though the proxy then needs none (open mode)",
    )
    for parser in (new, listed, revoke):
        parser.add_argument("--policies", help="policy folder (default ./policies)")
    keys.set_defaults(func=keys_command)


def keys_command(args: argparse.Namespace) -> int:
    folder = Path(args.policies or os.environ.get("CONTEXT_PROXY_POLICIES") or "policies")
    try:
        if args.action == "new":
            return _new(folder, args.team, args.label)
        if args.action == "list":
            return _list(folder)
        return _revoke(folder, args.prefix, args.allow_open)
    except (KeyEditError, PolicyError, OSError) as exc:
        print(f"context-proxy keys: {exc}", file=sys.stderr)
        return 1


def _texts(folder: Path) -> dict[str, str]:
    texts, problems = read_policy_dir(folder)
    if problems:
        raise PolicyError(problems)
    load_policy_texts(texts)  # the set as it stands must be valid before any edit
    return texts


def _team_file(folder: Path, texts: dict[str, str], team: str) -> Path:
    """The file of `team`'s policy, or the one to make for it."""
    policies = load_policy_texts(texts)
    for policy in policies.all():
        if policy.team == team and policy.source in texts:
            return Path(policy.source)
    if not team.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise KeyEditError(f"{team!r} is not a team name (letters, digits, '_', '-', '.')")
    return folder / f"{team}.yaml"


def _write(folder: Path, texts: dict[str, str], path: Path, text: str) -> None:
    """`text` as `path`, once the whole set loads with it; by a rename, never half-written."""
    load_policy_texts({**texts, str(path): text})
    folder.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=folder, prefix=".keys-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        if path.exists():
            os.chmod(temp, path.stat().st_mode & 0o777)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _new(folder: Path, team: str, label: str) -> int:
    texts = _texts(folder) if folder.is_dir() else {}
    path = _team_file(folder, texts, team)
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    created = datetime.now(UTC).strftime("%Y-%m-%d")
    text = texts.get(str(path), "")
    _write(folder, texts, path, with_key(text, KeyEntry(hash_key(key), label, created), team))
    print(key)
    print(f"context-proxy keys: a key for team {team!r} added to {path}; it is shown only "
          "now, keep it safe.", file=sys.stderr)  # fmt: skip
    return 0


def _rows(texts: dict[str, str]) -> list[tuple[str, KeyEntry, str]]:
    policies = load_policy_texts(texts)
    rows: list[tuple[str, KeyEntry, str]] = []
    for policy in policies.all():
        if policy.source in texts:
            rows += [(policy.team, e, policy.source) for e in entries(texts[policy.source])]
    return rows


def _list(folder: Path) -> int:
    rows = _rows(_texts(folder)) if folder.is_dir() else []
    print(f"{'team':<20} {'key':<23} {'label':<24} {'created':<10} file")
    for team, entry, source in rows:
        shown = entry.hash[: len("sha256:") + 16]
        print(f"{team:<20} {shown:<23} {entry.label:<24} {entry.created or '-':<10} {source}")
    return 0


def _revoke(folder: Path, prefix: str, allow_open: bool) -> int:
    texts = _texts(folder)
    wanted = prefix.lower().removeprefix("sha256:")
    if len(wanted) < MIN_PREFIX or any(c not in "0123456789abcdef" for c in wanted):
        raise KeyEditError(f"give at least {MIN_PREFIX} hex digits of the key's hash")
    rows = _rows(texts)
    found = [
        (t, e, s) for t, e, s in rows if e.hash.lower().removeprefix("sha256:").startswith(wanted)
    ]
    if not found:
        raise KeyEditError(f"no key's hash starts with {wanted}")
    if len(found) > 1:
        raise KeyEditError(f"{len(found)} keys' hashes start with {wanted}: give more digits")
    team, entry, source = found[0]
    if len(rows) == 1 and not allow_open:
        raise KeyEditError(
            "it is the last key: without keys the proxy needs none (open mode), and a running "
            "server refuses that change; pass --allow-open to revoke it anyway"
        )
    _write(folder, texts, Path(source), without_key(texts[source], entry.hash.lower()))
    print(f"context-proxy keys: revoked {entry.hash[:23]} of team {team!r} in {source}",
          file=sys.stderr)  # fmt: skip
    return 0
