"""The policy set in force, reloaded on SIGHUP and when the files change; bad sets are refused."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path

import yaml

from proxy.policy.load import PolicyError, load_policy_dir, load_policy_texts, read_policy_dir
from proxy.policy.policy_set import PolicySet

log = logging.getLogger("context_proxy.policy")

# How often the file watcher looks for changes and for its stop event (milliseconds).
WATCH_STEP_MS = 500
# A changed policy file is read once no policy file has changed for this long: a save
# that pauses for less is never read half-written. A save that pauses for longer is read
# as it stands (then refused if it does not parse): save by writing a new file and
# renaming it over the old one (what most editors and config tools do) for a change that
# is never seen half-done, or send SIGHUP once the files are complete.
QUIET_S = 2.0
QUIET_MAX_WAIT_S = 60.0  # a folder still changing after this: the next change reloads

# File texts by path, and a problem line for each file that could not be read.
Snapshot = tuple[dict[str, str], list[str]]


class PolicyStore:
    """Holds the last good PolicySet; `reload()` swaps it only when the new set is valid and safe.

    Safe means a reload never opens the proxy: a file that had content and is now empty
    (an editor's save caught between truncating and writing) is refused, and so is a set
    without keys while a file that held keys still exists, unless each such file says
    `keys: []` (what `keys revoke --allow-open` writes): then every key is revoked and the
    set is taken closed, nobody admitted, until a key is added or the proxy restarts.
    An empty file is still a valid policy at start and in `check`.
    """

    def __init__(
        self,
        directory: str,
        initial: PolicySet,
        texts: dict[str, str] | None = None,
        settle_s: float = 0.25,
        quiet_s: float = QUIET_S,
    ) -> None:
        self.directory = directory
        self.current = initial
        self.settle_s = settle_s
        self.quiet_s = quiet_s
        self._texts = dict(texts or {})  # the file texts of the set in force
        # The files that held the keys last in force: while one exists, no reload opens.
        self._keyed = {p.source for p in initial.all() if p.keys}

    @classmethod
    def load(cls, directory: str) -> PolicyStore:
        """Load at start; raises PolicyError so a bad set never starts serving."""
        folder = Path(directory)
        if not folder.is_dir():
            return cls(directory, load_policy_dir(directory))
        texts, problems = read_policy_dir(folder)
        return cls(directory, load_policy_texts(texts, problems), texts)

    def reload(self) -> bool:
        """Read the folder now and swap the set in if it is valid and safe (SIGHUP)."""
        return self.apply(self._read())

    def _read(self) -> Snapshot | None:
        folder = Path(self.directory)
        return read_policy_dir(folder) if folder.is_dir() else None

    def apply(self, snapshot: Snapshot | None) -> bool:
        """Swap in the set `snapshot` describes; refuse (and log why) a bad or unsafe one."""
        if snapshot is None:
            if not self._texts:
                return True  # started on the built-in default and still nothing there
            return _refused([f"{self.directory}: policy folder is missing"])
        texts, unreadable = snapshot
        try:
            fresh = load_policy_texts(texts, unreadable)
        except PolicyError as exc:
            return _refused(exc.problems)
        held = sorted(s for s in self._keyed if s in texts) if fresh.open_mode else []
        unsafe = self._unsafe(texts, held)
        if unsafe:
            return _refused(unsafe)
        if held:  # each says `keys: []`: every key revoked on purpose, which opens nothing
            fresh = PolicySet(fresh.default, fresh.policies, closed=True)
            log.warning(
                "no proxy key is left: every request is refused until a key is added, or "
                "the proxy restarts (then in open mode)",
                extra={"files": held},
            )
        self._keyed = {p.source for p in fresh.all() if p.keys} or set(held)
        self.current = fresh
        self._texts = dict(texts)
        log.info("policies reloaded", extra={"teams": [p.team for p in fresh.all()]})
        return True

    def _unsafe(self, texts: dict[str, str], held: list[str]) -> list[str]:
        """Why `texts` may be a save caught half-done; `held`: the files that held keys, in
        a set that has none."""
        problems = [
            f"{path}:1: the file had a policy and is now empty (a save in progress?); "
            "write the policy back, or delete the file to drop it"
            for path, old in self._texts.items()
            if path in texts and _blank(texts[path]) and not _blank(old)
        ]
        problems.extend(
            f"{source}:1: this file held keys and now lists none (a save in progress?); "
            "write `keys: []` to revoke every key (the proxy then refuses every request "
            "until it restarts), or delete the file or restart to switch to open mode"
            for source in held
            if not _says_no_keys(texts[source])
        )
        return problems

    async def settled(self) -> Snapshot | None:
        """The folder once no policy file has changed for `quiet_s` and two reads
        `settle_s` apart agree; None if it keeps changing. A save that stalls (a slow
        disk, an editor writing in pieces) would otherwise go live as a prefix of the
        file: a team without its keys or quota until the save completes."""
        waited = 0.0
        while (wait := self._newest_change() + self.quiet_s - time.time()) > 0:
            if waited > QUIET_MAX_WAIT_S:
                return None
            await asyncio.sleep(wait)
            waited += wait
        before = self._read()
        for _ in range(8):
            await asyncio.sleep(self.settle_s)
            after = self._read()
            if after == before:
                return after
            before = after
        return None

    def _newest_change(self) -> float:
        """When a policy file in the folder last changed (mtime), 0 when none can be read.

        A file is read through its symlink (a mounted ConfigMap's files point into
        `..data/`), and the `..data` link itself counts: its swap is the change."""
        try:
            files = list(Path(self.directory).iterdir())
        except OSError:
            return 0.0
        newest = 0.0
        for path in files:
            if _watched(str(path)):
                with contextlib.suppress(OSError):
                    newest = max(newest, path.stat().st_mtime)
                    newest = max(newest, path.lstat().st_mtime)
        return newest

    async def watch(self, stop: asyncio.Event) -> None:
        """Reload when a policy file changes, until `stop` is set."""
        from watchfiles import awatch  # imported here: only the watcher task needs it

        folder = Path(self.directory)
        if not folder.is_dir():
            return
        try:
            async for _changes in awatch(
                folder,
                stop_event=stop,
                debounce=200,
                # The watcher thread wakes every `step` to look at `stop` (taking the GIL
                # from the request loop): 20 times a second by default, ~1% of a busy
                # proxy's CPU. Half a second still reloads well under a second after a save.
                step=WATCH_STEP_MS,
                recursive=False,
                watch_filter=lambda _change, path: _watched(path),
            ):
                # A save is often truncate-then-write: load only what stays put for a moment.
                snapshot = await self.settled()
                if snapshot is None and folder.is_dir():
                    log.info("policy files still changing; the next change reloads them")
                    continue
                self.apply(snapshot)
        except (OSError, RuntimeError) as exc:  # e.g. inotify limits: SIGHUP still works
            log.warning("policy file watching stopped: %s", exc)


# Kubernetes updates a mounted ConfigMap by writing a new timestamped folder and renaming a
# `..data_tmp` symlink over `..data`, which the files' own symlinks point through: none of
# the files' names is touched, so the rename of `..data` is the change to watch for.
CONFIGMAP_LINK = "..data"


def _watched(path: str) -> bool:
    """Whether a change to `path` may change the policy set: a policy file or `..data`."""
    return path.endswith((".yaml", ".yml")) or Path(path).name == CONFIGMAP_LINK


def _blank(text: str) -> bool:
    """Whether YAML text holds nothing (empty, whitespace, comments only)."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader) is None
    except yaml.YAMLError:
        return False


def _says_no_keys(text: str) -> bool:
    """Whether a policy's text says `keys: []` in so many words (not a `keys` left out)."""
    try:
        values = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    return isinstance(values, dict) and values.get("keys") == []


def _refused(problems: list[str]) -> bool:
    log.error(
        "policy reload refused; the last good set stays in force", extra={"problems": problems}
    )
    for problem in problems:
        log.error("policy problem: %s", problem)
    return False
