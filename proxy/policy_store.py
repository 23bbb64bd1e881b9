"""The policy set in force, reloaded on SIGHUP and when the files change; bad sets are refused."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from proxy.policy import PolicySet
from proxy.policy_load import PolicyError, load_policy_dir

log = logging.getLogger("context_proxy.policy")


class PolicyStore:
    """Holds the last good PolicySet; `reload()` swaps it only when the new set is valid."""

    def __init__(self, directory: str, initial: PolicySet) -> None:
        self.directory = directory
        self.current = initial

    @classmethod
    def load(cls, directory: str) -> PolicyStore:
        """Load at start; raises PolicyError so a bad set never starts serving."""
        return cls(directory, load_policy_dir(directory))

    def reload(self) -> bool:
        try:
            fresh = load_policy_dir(self.directory)
        except PolicyError as exc:
            log.error(
                "policy reload refused; the last good set stays in force",
                extra={"problems": exc.problems},
            )
            for problem in exc.problems:
                log.error("policy problem: %s", problem)
            return False
        self.current = fresh
        log.info("policies reloaded", extra={"teams": [p.team for p in fresh.all()]})
        return True

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
                recursive=False,
                watch_filter=lambda _change, path: path.endswith((".yaml", ".yml")),
            ):
                self.reload()
        except (OSError, RuntimeError) as exc:  # e.g. inotify limits: SIGHUP still works
            log.warning("policy file watching stopped: %s", exc)
