"""The image, built from the Dockerfile as written (only its base swapped for the local
stand-in) and run as the README runs it: read-only root, the shipped policies mounted,
`/healthz`, the README's request through to a fake upstream (windows, prices and counts read
offline from litellm's files), a non-root uid, exit 0 on SIGTERM.

Marked `image`: it takes minutes (podman with the vfs driver on two cores), so `pytest`
leaves it out and `.ci/run` runs it (`pytest -m image`).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from proxy.policy.model import Policy
from proxy.tokens.counter import TokenCounter
from proxy.tokens.windows import ContextWindows
from tests.conftest import free_port
from tests.deploy import podman
from tests.fake_upstream import FakeUpstream

pytestmark = pytest.mark.image
ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
TAG = "localhost/context-proxy:ci"
MAX_BYTES = 300 * 1000 * 1000
UID = 10001


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    started = time.monotonic()
    podman.ensure_tools()
    with podman.locked():
        base = podman.stand_in_base()
        podman.build(ROOT, TAG, base, tmp_path_factory.mktemp("build"))
        podman.prune_old()
    print(f"image built in {time.monotonic() - started:.0f} s")
    yield TAG


def readme_docker(command: str) -> list[str]:
    """The README's `docker build` or `docker run` line, as argv."""
    section = README[README.index("With Docker") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "the README's Docker block is missing"
    (line,) = [x for x in block.group(1).splitlines() if x.startswith(f"docker {command} ")]
    return shlex.split(line.split("  #")[0])


def inspect(tag: str, template: str) -> str:
    return podman.podman("image", "inspect", "--format", template, tag).stdout.strip()


def test_the_image_is_small_slim_and_keeps_its_healthcheck(image: str) -> None:
    assert readme_docker("build") == ["docker", "build", "-t", "context-proxy", "."]
    size = int(inspect(image, "{{.Size}}"))
    print(f"image: {size / 1e6:.0f} MB")
    assert size <= MAX_BYTES, f"{size / 1e6:.0f} MB"
    assert inspect(image, "{{.Config.User}}") == f"{UID}:{UID}"
    assert "healthz" in inspect(image, "{{json .Config.Healthcheck}}")
    # Nothing of the build in it: no sources, no build folders, no client stack, no pip in
    # the environment; litellm only as the data the proxy reads.
    script = (
        "test ! -e /src && test ! -e /app && ! find /opt -name '*.egg-info' | grep -q . "
        "&& test ! -e /opt/context-proxy/bin/pip && python -c \"import importlib.util as u; "
        "import sys; sys.exit(any(u.find_spec(m) for m in ('openai', 'huggingface_hub', "
        "'litellm.main')))\" && find /opt/context-proxy -path '*/litellm/*' -type f | sort"
    )
    done = podman.podman("run", "--rm", *podman.ULIMITS, "--entrypoint", "sh", image, "-c", script)
    kept = [Path(line).name for line in done.stdout.split()]
    assert "model_prices_and_context_window_backup.json" in kept and len(kept) == 4, kept


def test_the_image_serves_as_the_readme_runs_it(
    image: str, upstream: FakeUpstream, upstream_url: str, tmp_path: Path
) -> None:
    argv = readme_docker("run")
    assert "--read-only" in argv and argv[-1] == "context-proxy"
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]
    assert mounts == ["$PWD/policies:/etc/context-proxy/policies:ro"]
    state = tmp_path / "state"
    state.mkdir()
    os.chown(state, UID, UID)
    port = free_port()
    name = f"context-proxy-ci-{uuid.uuid4().hex[:8]}"
    # As the README's line, on the host's network (the fake upstream is on its loopback;
    # -p has nothing to publish there), the usage log's volume where the test can read it.
    options = [
        "--read-only", "-v", f"{ROOT}/policies:/etc/context-proxy/policies:ro",
        "-v", f"{state}:/var/lib/context-proxy", "--network", "host",
        "-e", "CONTEXT_PROXY_HOST=127.0.0.1", "-e", f"CONTEXT_PROXY_PORT={port}",
        "-e", f"CONTEXT_PROXY_UPSTREAM={upstream_url}",
    ]  # fmt: skip
    podman.run(image, name, options)
    try:
        url = f"http://127.0.0.1:{port}"
        healthy_after = podman.wait_healthy(url, 30)
        print(f"/healthz answered {healthy_after:.1f} s after the start")
        pid = podman.podman("inspect", "--format", "{{.State.Pid}}", name).stdout.strip()
        uid = subprocess.run(["ps", "-o", "uid=", "-p", pid], capture_output=True, text=True)
        assert int(uid.stdout) == UID
        curl = README[README.index("Try it with your key") :]
        request = re.search(r"```sh\n(curl .*?)```", curl, re.S)
        assert request
        done = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + request.group(1).replace(":8080", f":{port}")
             .replace("curl -s", "curl -s -D /dev/stderr")],
            capture_output=True, text=True, timeout=60, check=True,
            env={**os.environ, "OPENAI_API_KEY": "sk-the-clients-own"},
        )  # fmt: skip
        answer = orjson.loads(done.stdout)
        assert answer["choices"][0]["message"]["content"] == upstream.reply_text, answer
        assert upstream.last.headers["authorization"] == "Bearer sk-the-clients-own"
        headers = done.stderr.lower()
        # The model's window from litellm's map, its prompt counted as here, offline.
        body = orjson.loads(re.findall(r"-d '(.*?)'", request.group(1), re.S)[0])
        policy = Policy()
        window = ContextWindows().lookup(body["model"], policy)
        counted = TokenCounter().chat_tokenizer(body["model"], policy).count_request(body)
        assert f"x-context-window: {window}\n" in headers and window == 128000
        assert f"x-context-tokens-before: {counted}\n" in headers
        stopped = time.monotonic()
        podman.podman("kill", "--signal", "TERM", name)
        code = podman.podman("wait", name, timeout=60).stdout.strip()
        assert code == "0", podman.podman("logs", name).stderr[-3000:]
        print(f"exited {code} {time.monotonic() - stopped:.1f} s after SIGTERM")
    finally:
        podman.podman("rm", "-f", name, check=False)
    (row,) = [orjson.loads(x) for x in (state / "usage.jsonl").read_bytes().splitlines()]
    assert (row["team"], row["status"], row["context_window"]) == ("default", 200, 128000)
    assert row["cost_usd"] > 0  # priced from litellm's map
