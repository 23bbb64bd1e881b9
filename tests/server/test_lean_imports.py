"""What a served worker imports: nothing heavy that its settings do not use."""

from __future__ import annotations

import subprocess
import sys


def imported_after(code: str) -> set[str]:
    """The top-level modules a fresh interpreter holds after running `code`."""
    probe = code + "\nimport sys\nprint(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(out.stdout.split())


def test_a_worker_without_state_never_imports_redis_or_litellm() -> None:
    # The app as `serve` builds it in each worker (app_from_env), settings from the env.
    mods = imported_after("from proxy.server.app.app import create_app\nfrom proxy.cli import main")
    assert "proxy" in mods and "starlette" in mods  # the probe ran what it says
    assert "redis" not in mods  # ~15 MB per worker, only for --state
    assert "litellm" not in mods  # 2.6 s and 160 MB: its data files are read, it is not run


def test_state_brings_redis_in() -> None:
    assert "redis" in imported_after("import proxy.state")
