"""The README as a front page: short, its links resolve, and the key-mode walk-through in
it works as written (the set-up blocks run in CI: .ci/readme_setup.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx

from proxy.policy.model import hash_key
from tests.conftest import free_port
from tests.fake_upstream import FakeUpstream
from tests.processes import serve_command, wait_ready

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
LINK = re.compile(r"\]\(([^)#\s]+\.md|[^)#\s]*/)?(#[^)\s]+)?\)")


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a markdown file's headings."""
    out = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add("#" + re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_the_readme_is_a_front_page_whose_links_resolve() -> None:
    assert len(README.splitlines()) <= 450
    pages = {"README.md": README}
    for page in ("docs/configuring.md", "docs/clients.md", "docs/fitting.md",
                 "docs/operations.md", "docs/benchmarks.md", "SECURITY.md"):  # fmt: skip
        assert f"]({page}" in README, page
    for source, text in [("README.md", README)] + [
        (f"docs/{p.name}", p.read_text()) for p in (ROOT / "docs").glob("*.md")
    ]:
        for target, anchor in LINK.findall(text):
            path = (ROOT / source).parent / target if target else ROOT / source
            assert path.exists(), (source, target)
            if anchor and path.suffix == ".md":
                body = pages.get(target) or path.read_text()
                assert anchor in anchors(body), (source, target, anchor)


def _block(after: str, index: int = 0) -> str:
    section = README[README.index(after) :]
    return re.findall(r"```(?:sh|yaml)\n(.*?)```", section, re.S)[index]


def test_the_walk_through_adds_a_team_as_written(
    tmp_path: Path, fake_upstream_server: tuple[FakeUpstream, str]
) -> None:
    """Step 1's command makes a key and writes its hash into the team's file; step 2's
    settings in that file pass `check`; the server started as in step 3 lets the key in,
    sends the upstream the team's own key, and refuses a request without one."""
    upstream, base = fake_upstream_server
    upstream.reset()
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    # Run where `keys new`'s default folder (./policies) is the test's own: never the
    # checkout's, whatever CONTEXT_PROXY_POLICIES the caller's shell has set.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CONTEXT_PROXY_")}
    made = subprocess.run(
        ["bash", "-c", _block("1. Make the team a proxy key") + 'echo "KEY=$KEY"'],
        capture_output=True, text=True, check=True, cwd=tmp_path,
        env={**clean, "PATH": path},
    )  # fmt: skip
    key = next(line for line in made.stdout.split() if line.startswith("KEY="))[4:]
    assert key.startswith("cp-") and key not in made.stderr
    policies = tmp_path / "policies"
    written = (policies / "research.yaml").read_text()
    assert hash_key(key) in written and key not in written
    settings = textwrap.dedent(_block("2. Give the team its settings in that file")).splitlines()
    given = [line for line in settings if not line.startswith(("team:", "keys:", "  - {hash"))]
    (policies / "research.yaml").write_text(written + "\n".join(given) + "\n")
    env = {**os.environ, "RESEARCH_OPENAI_KEY": "sk-upstream-research"}
    checked = subprocess.run(
        [sys.executable, "-m", "proxy", "check", "--policies", str(policies)],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    port = free_port()
    command = serve_command(port, policies, base + "/v1", tmp_path / "usage.jsonl")
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, process)
        body: dict[str, Any] = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
        ok = httpx.post(url + "/v1/chat/completions", json=body,
                        headers={"authorization": f"Bearer {key}"})  # fmt: skip
        assert ok.status_code == 200, ok.text
        assert upstream.last.headers["authorization"] == "Bearer sk-upstream-research"
        assert httpx.post(url + "/v1/chat/completions", json=body).status_code == 401
    finally:
        process.terminate()
        process.wait(timeout=30)
