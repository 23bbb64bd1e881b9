"""Writing a policy file for `keys`: one command at a time, over the text it read, as the
folder's other files are (mode and owner), by a rename a reload never sees half done."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from proxy.policy.key_edit import KeyEditError

LOCK_NAME = ".keys.lock"  # not *.yaml: the server neither reads it nor reloads for it
LOCK_WAIT_S = 30.0
_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)

# A file's mode bits, owner and group.
Likeness = tuple[int, int, int]


class FileChanged(KeyEditError):
    """The file no longer holds the text the edit was made on (edited by hand meanwhile)."""


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Held while one `keys` command reads, edits and writes the folder: two at once would
    each write their edit over a text without the other's (a printed key lost, a revoked
    key back). A lock file, as NFS locks only files opened for writing."""
    fd = _open_lock(folder)
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise KeyEditError(
                        f"{folder}: another `context-proxy keys` has been editing the folder "
                        f"for {LOCK_WAIT_S:g} s; nothing was written, try again"
                    ) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # which releases the lock


def _open_lock(folder: Path) -> int:
    path = folder / LOCK_NAME
    flags = os.O_CLOEXEC | os.O_NOFOLLOW  # a link put there leads nowhere else
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o666)
    except OSError as exc:
        if exc.errno not in _NOT_WRITABLE:
            raise
        try:  # made by another user, or on a read-only mount: a read handle locks too
            return os.open(path, os.O_RDONLY | flags)
        except FileNotFoundError:
            raise _unwritable(folder, exc) from None


def write_policy_file(folder: Path, path: Path, text: str, based_on: str | None) -> str:
    """`text` as `path`, unless `path` no longer holds `based_on` (None: no file there),
    which raises FileChanged. Returns a warning to show, or ''.

    The file takes the mode and owner of the file it replaces or, when new, of the
    folder's other policy files: a server running as another user reads those, so it
    must read this one (a file it cannot read makes it refuse every later reload)."""
    if path.is_symlink():
        raise KeyEditError(
            f"{path} is a symbolic link (to {os.readlink(path)}): `keys` edits only the "
            "policy folder's own files; edit the file it points to by hand"
        )
    try:
        like = _likeness(path) if based_on is not None else _folder_likeness(folder)
    except FileNotFoundError:
        raise FileChanged(f"{path} was removed while it was being edited") from None
    temp = folder / f".keys-{secrets.token_hex(8)}.tmp"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise _unwritable(folder, exc) if exc.errno in _NOT_WRITABLE else exc from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            warning = _take(out.fileno(), like, path) if like is not None else ""
            os.fsync(out.fileno())
        if _text_of(path) != based_on:
            raise FileChanged(f"{path} changed while it was being edited")
        _publish(temp, path, replace=based_on is not None)
    finally:
        temp.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # the rename itself made durable, where it can be
        directory = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    return warning


def _publish(temp: Path, path: Path, replace: bool) -> None:
    if replace:
        os.replace(temp, path)
        return
    try:
        os.link(temp, path)  # made only if still absent: a file made meanwhile stays
    except FileExistsError:
        raise FileChanged(f"{path} was made while it was being edited") from None
    except OSError:  # a file system without hard links: the check just before stands
        os.replace(temp, path)


def _text_of(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")  # as read_policy_dir reads it
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:  # saved meanwhile as something else: read again, and refused
        raise FileChanged(f"{path} changed while it was being edited") from None


def _likeness(path: Path) -> Likeness:
    found = path.lstat()
    return stat.S_IMODE(found.st_mode) & 0o777, found.st_uid, found.st_gid


def _folder_likeness(folder: Path) -> Likeness | None:
    """The mode and owner most of the folder's policy files share; None when there is no
    file to go by (then the umask decides, as for any new file)."""
    seen: Counter[Likeness] = Counter()
    for other in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        with contextlib.suppress(OSError):
            if not other.is_symlink() and other.is_file():
                seen[_likeness(other)] += 1
    return seen.most_common(1)[0][0] if seen else None


def _take(fd: int, like: Likeness, path: Path) -> str:
    """Give the open file `like`'s owner (or just its group) where this process may, then
    its mode; a warning when the owner could not be matched."""
    mode, uid, gid = like
    for owner, group in ((uid, gid), (-1, gid)):
        try:
            os.fchown(fd, owner, group)
            break
        except PermissionError:
            continue
    os.fchmod(fd, mode)  # after the owner: a change of owner may clear mode bits
    now = os.fstat(fd)
    if (now.st_uid, now.st_gid) == (uid, gid):
        return ""
    return (
        f"{path} is owned by uid {now.st_uid}, gid {now.st_gid}, the folder's policy files "
        f"by uid {uid}, gid {gid}, and this user may not change that: a server running as "
        "another user may not read it (then it keeps the last set it could read)"
    )


def _unwritable(folder: Path, exc: OSError) -> KeyEditError:
    return KeyEditError(
        f"{folder}: the policy folder cannot be written ({exc.strerror}); nothing was "
        "changed. `keys` edits the files where they are: run it as a user who may write "
        "the folder (for a ConfigMap or another read-only mount, edit its source)"
    )
