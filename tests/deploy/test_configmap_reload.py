"""A mounted ConfigMap's update is picked up like a file edit: Kubernetes writes the new files
into a fresh timestamped folder and renames a `..data_tmp` symlink over `..data`, which the
policy files' own symlinks point through. Done here exactly so, under a running server."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx

from proxy.policy.model import hash_key
from tests.conftest import free_port
from tests.processes import serve_command, wait_ready

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


def team(*keys: str) -> str:
    listed = ", ".join(f'"{hash_key(k)}"' for k in keys)
    return f"team: research\nkeys: [{listed}]\nupstream: {{api_key_env: RESEARCH_KEY}}\n"


def publish(folder: Path, stamp: str, files: dict[str, str]) -> None:
    """What the kubelet's atomic writer does: a new folder, `..data` swapped to it in one
    rename, the files' links made for new names, the old folder removed."""
    fresh = folder / f"..{stamp}"
    fresh.mkdir()
    for name, text in files.items():
        (fresh / name).write_text(text)
    data = folder / "..data"
    old = os.readlink(data) if data.is_symlink() else None
    (folder / "..data_tmp").symlink_to(fresh.name)
    os.rename(folder / "..data_tmp", data)
    for name in files:
        if not (folder / name).is_symlink():
            (folder / name).symlink_to(f"..data/{name}")
    if old is not None:
        shutil.rmtree(folder / old)


def status(url: str, key: str) -> int:
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(url + "/v1/chat/completions", json=CHAT, headers=headers).status_code


def test_a_key_revoked_by_a_configmap_update_is_refused_within_10_s(
    tmp_path: Path, upstream_url: str
) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    publish(policies, "2026_01_01_00_00_00.1", {"default.yaml": "", "research.yaml": team("k1", "k2")})
    port = free_port()
    env = {**os.environ, "RESEARCH_KEY": "sk-upstream"}
    command = serve_command(port, policies, upstream_url, tmp_path / "usage.jsonl")
    server = subprocess.Popen(command, env=env, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, server)
        assert status(url, "k1") == 200 and status(url, "k2") == 200
        publish(policies, "2026_01_01_00_05_00.2", {"default.yaml": "", "research.yaml": team("k2")})
        revoked = time.monotonic()
        while status(url, "k1") != 401:
            assert time.monotonic() - revoked < 10, "the revoked key is still accepted"
            time.sleep(0.2)
        assert status(url, "k2") == 200
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0, err
    assert b"reload refused" not in err
