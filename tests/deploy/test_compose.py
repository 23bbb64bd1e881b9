"""deploy/docker-compose.yml as Compose v2 reads it: valid against the Compose Specification's
schema (the copy check-jsonschema ships, read offline), and the proxy service run as the
image is meant to run, its stop grace period matched to the server's shutdown time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "docker-compose.yml"


def check(path: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec"]
    return subprocess.run([*command, str(path)], capture_output=True, text=True, timeout=120)


def test_the_compose_file_is_valid_compose_v2(tmp_path: Path) -> None:
    done = check(COMPOSE)
    assert done.returncode == 0, done.stdout + done.stderr
    # The check itself refuses what Compose v2 refuses.
    bad = tmp_path / "compose.yml"
    bad.write_text("services:\n  proxy:\n    image: x\n    stop_grace: 40s\n")
    assert check(bad).returncode == 1


def seconds(duration: str) -> float:
    return float(duration.removesuffix("s"))


def test_the_proxy_service_runs_locked_down_and_drains_within_its_grace_period() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    assert "version" not in compose  # obsolete in Compose v2, which warns about it
    proxy = compose["services"]["proxy"]
    assert proxy["read_only"] is True and proxy["cap_drop"] == ["ALL"]
    assert proxy["security_opt"] == ["no-new-privileges:true"]
    shutdown = float(proxy["environment"]["CONTEXT_PROXY_GRACEFUL_SHUTDOWN_S"])
    assert 5 <= seconds(proxy["stop_grace_period"]) - shutdown <= 30
    assert proxy["volumes"] == ["../policies:/etc/context-proxy/policies:ro"]
