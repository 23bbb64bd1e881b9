"""The README's first run as a new user makes it: `context-proxy serve` from the checkout's
root with its defaults and the shipped `policies/`, then the README's curl with the client's
own key, answered by the upstream, which got that key (open mode)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import orjson

from proxy.policy.load import load_policy_dir
from tests.conftest import free_port
from tests.fake_upstream import FakeUpstream
from tests.processes import wait_ready

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def readme_serve_line() -> list[str]:
    """The run block's `context-proxy serve` line, as argv."""
    block = re.search(r"<!-- setup: run -->\s*```sh\n(.*?)```", README, re.S)
    assert block, "the README's run block is missing"
    (line,) = [x for x in block.group(1).splitlines() if x.startswith("context-proxy serve")]
    return shlex.split(line.split("  #")[0])


def readme_curl() -> str:
    """The README's first request, the curl block after "Try it with your key"."""
    section = README[README.index("Try it with your key") :]
    found = re.search(r"```sh\n(curl .*?)```", section, re.S)
    assert found, "the README's curl block is missing"
    return found.group(1)


def test_the_shipped_policies_are_open_mode() -> None:
    shipped = load_policy_dir(ROOT / "policies")
    assert shipped.open_mode, [p.source for p in shipped.all() if p.keys]


def test_the_readme_first_run_answers_with_the_clients_own_key(
    tmp_path: Path, upstream: FakeUpstream, upstream_url: str
) -> None:
    argv = readme_serve_line()
    assert argv[:2] == ["context-proxy", "serve"]
    # Only the upstream goes to the fake: every other flag of the line is kept as written.
    argv[argv.index("--upstream") + 1] = upstream_url
    port = free_port()  # 8080 may be taken on a shared machine; the README's port otherwise
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTEXT_PROXY_")}
    env |= {"CONTEXT_PROXY_PORT": str(port), "CONTEXT_PROXY_USAGE_LOG": str(tmp_path / "u.jsonl")}
    # `python -m proxy` is the console script's twin, and runs this checkout's code.
    command = [sys.executable, "-m", "proxy", *argv[1:]]
    server = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE)
    try:
        wait_ready(f"http://127.0.0.1:{port}", server)
        curl = readme_curl().replace("127.0.0.1:8080", f"127.0.0.1:{port}")
        assert f"127.0.0.1:{port}" in curl
        done = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + curl], capture_output=True, timeout=60,
            env={**env, "OPENAI_API_KEY": "sk-the-clients-own"}, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        answer = orjson.loads(done.stdout)
        assert "error" not in answer, answer
        assert answer["choices"][0]["message"]["content"] == upstream.reply_text
        assert upstream.last.headers["authorization"] == "Bearer sk-the-clients-own"
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0, err
    assert b"api_key_env" not in err  # no team with keys and no upstream key: open mode
    rows = [orjson.loads(x) for x in (tmp_path / "u.jsonl").read_bytes().splitlines()]
    assert [(r["team"], r["status"]) for r in rows] == [("default", 200)]
