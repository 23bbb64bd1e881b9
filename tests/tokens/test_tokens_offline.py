"""No network while counting: every tokenizer family, in a fresh process, sockets blocked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.tokens.test_tokens import make_tokenizer_json

ROOT = Path(__file__).resolve().parents[2]

BLOCK_SOCKETS = r"""
import socket, sys

def refuse(*args, **kwargs):
    raise AssertionError("network access attempted")

socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
"""

COUNT_EVERY_FAMILY = r"""
from types import MappingProxyType
from proxy.policy.model import ModelPolicy, Policy
from proxy.tokens.counter import TokenCounter

policy = Policy(
    source=sys.argv[1] + "/team.yaml",
    models=MappingProxyType({"my-llama": ModelPolicy(tokenizer="tok.json")}),
)
counter = TokenCounter()
body = {"messages": [{"role": "user", "content": "hello world, counting offline"}]}
for model in ("gpt-4o", "gpt-4", "my-llama", "claude-3-5-sonnet"):
    tokenizer = counter.chat_tokenizer(model, policy)
    count, cut = tokenizer.count_request(body), tokenizer.truncate_text("hello world", 1)
    print(model, tokenizer.name, count, cut)
"""


def run_blocked(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    """Run `script` in a fresh interpreter with sockets blocked and no tiktoken cache set."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")
    }
    env["PYTHONPATH"] = str(ROOT)
    # An empty tiktoken default cache: tiktoken would have to download if we did not point it.
    env["TMPDIR"] = str(tmp_path)
    return subprocess.run(
        [sys.executable, "-c", BLOCK_SOCKETS + script, str(tmp_path)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_socket_block_catches_a_download(tmp_path: Path) -> None:
    # The control: plain tiktoken without the offline files must trip the block.
    done = run_blocked(tmp_path, "import tiktoken; tiktoken.get_encoding('o200k_base')")
    assert done.returncode != 0
    assert "network access attempted" in done.stderr


def test_counting_never_touches_the_network(tmp_path: Path) -> None:
    make_tokenizer_json(tmp_path)
    done = run_blocked(tmp_path, COUNT_EVERY_FAMILY)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["gpt-4o"].startswith("o200k_base ")
    assert lines["gpt-4"].startswith("cl100k_base ")
    assert lines["my-llama"].startswith("tokenizer:tok.json ")
    assert lines["claude-3-5-sonnet"].startswith("estimate:cl100k_base*1.25 ")


def test_environment_is_restored_after_loading(tmp_path: Path) -> None:
    script = (
        "import os; os.environ['TIKTOKEN_CACHE_DIR'] = 'mine'\n"
        "from proxy.tokens.text import load_encoding\n"
        "load_encoding('o200k_base'); print(os.environ['TIKTOKEN_CACHE_DIR'])"
    )
    done = run_blocked(tmp_path, script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "mine"
