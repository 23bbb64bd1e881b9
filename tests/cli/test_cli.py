"""The CLI: missing policy folders, credential warnings, the start-up line, closed stdout."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from proxy.cli.main import main
from proxy.cli.serve_report import credential_warnings, log_start, masked_state, safe_url
from proxy.policy.load import load_policy_dir
from proxy.policy.model import hash_key
from proxy.server.core.settings import Settings
from tests.conftest import free_port
from tests.processes import serve_command, wait_ready

ROOT = Path(__file__).resolve().parents[2]
KEYED = f'team: research\nbudget: {{ratio: 0.5}}\nkeys: ["{hash_key("k1")}"]\n'


def run_cli(*argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", *argv], capture_output=True, timeout=60, cwd=ROOT
    )


def test_check_on_a_named_missing_folder_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CONTEXT_PROXY_POLICIES", raising=False)
    missing = tmp_path / "polcies"
    assert main(["check", "--policies", str(missing)]) == 1
    assert capsys.readouterr().out.startswith(f"{missing}: policy folder does not exist")
    monkeypatch.setenv("CONTEXT_PROXY_POLICIES", str(missing))
    assert main(["check"]) == 1
    # Only the implicit ./policies may be missing: then the built-in default applies.
    monkeypatch.delenv("CONTEXT_PROXY_POLICIES")
    monkeypatch.chdir(tmp_path)
    assert main(["check"]) == 0
    assert "built-in default" in capsys.readouterr().out


def test_serve_on_a_named_missing_folder_exits_1(tmp_path: Path) -> None:
    missing = tmp_path / "polcies"
    done = run_cli("serve", "--port", str(free_port()), "--policies", str(missing))
    assert done.returncode == 1
    assert f"{missing}: policy folder does not exist".encode() in done.stderr
    assert b"Traceback" not in done.stderr


def test_plan_on_a_named_missing_folder_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "polcies"
    assert (
        main(["plan", str(ROOT / "examples/agent_session.json"), "--policies", str(missing)]) == 1
    )
    assert "policy folder does not exist" in capsys.readouterr().err


def test_check_warns_about_keys_without_upstream_credentials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "research.yaml").write_text(KEYED)
    assert main(["check", "--policies", str(tmp_path)]) == 0  # a warning is not an error
    out = capsys.readouterr().out
    assert f"{tmp_path / 'research.yaml'}:3: warning: team 'research' has keys" in out
    assert "api_key_env" in out and out.rstrip().splitlines()[-1].startswith("ok:")
    (tmp_path / "research.yaml").write_text(KEYED + "upstream: {api_key_env: RESEARCH_KEY}\n")
    assert main(["check", "--policies", str(tmp_path)]) == 0
    assert "warning" not in capsys.readouterr().out  # check cannot know the server's env


def test_credential_warnings_at_start(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(KEYED + "upstream: {api_key_env: A_KEY}\n")
    (tmp_path / "b.yaml").write_text(f'keys: ["{hash_key("k2")}"]\n')
    (tmp_path / "c.yaml").write_text("budget: {ratio: 0.5}\n")  # no keys: nothing to say
    policies = load_policy_dir(tmp_path)
    warnings = credential_warnings(policies, {})
    assert len(warnings) == 2
    assert any("A_KEY, which is not set" in w for w in warnings)
    assert any(w.startswith(f"{tmp_path / 'b.yaml'}:1: warning") for w in warnings)
    assert len(credential_warnings(policies, {"A_KEY": "x"})) == 1


def test_urls_in_the_start_line_carry_no_secrets() -> None:
    assert safe_url("https://user:pw@api.example.com:8443/v1?key=s#f") == (
        "https://api.example.com:8443/v1"
    )
    assert masked_state("redis://:s3cret@cache:6379/0") == "redis://:***@cache:6379/0"
    assert masked_state("redis://app:s3cret@cache/1") == "redis://app:***@cache/1"
    assert masked_state("redis://cache:6379/0") == "redis://cache:6379/0"
    assert masked_state(None) == "in-process"


def test_start_line_says_what_is_in_force(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "research.yaml").write_text(
        KEYED + 'upstream: {base_url: "http://own.example/v1?k=secret"}\n'
    )
    settings = Settings(
        policies=str(tmp_path),
        upstream="https://u:pw@up.example/v1?token=t",
        state="redis://:pw@r:6379/0",
        workers=2,
    )
    with caplog.at_level(logging.INFO, logger="context_proxy.start"):
        log_start(settings, load_policy_dir(tmp_path), {})
    (line,) = [r for r in caplog.records if r.getMessage() == "context-proxy starting"]
    assert vars(line)["default_upstream"] == "https://up.example/v1"
    assert vars(line)["state"] == "redis://:***@r:6379/0"
    # Each team with the upstream it goes to (its own base URL, else the default).
    assert vars(line)["teams"] == {
        "default": "https://up.example/v1",
        "research": "http://own.example/v1",
    }
    assert (vars(line)["mode"], vars(line)["workers"]) == ("keys", 2)
    assert vars(line)["policies"] == str(tmp_path)
    assert "pw" not in caplog.text and "token" not in caplog.text and "secret" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="context_proxy.start"):
        log_start(Settings(policies=str(tmp_path / "none")), load_policy_dir(tmp_path / "none"), {})
    (line,) = [r for r in caplog.records if r.getMessage() == "context-proxy starting"]
    assert vars(line)["policies"].startswith("built-in default")
    assert vars(line)["mode"] == "open"


def test_serve_logs_warnings_and_the_start_line(tmp_path: Path, upstream_url: str) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "research.yaml").write_text(KEYED)
    port = free_port()
    process = subprocess.Popen(
        serve_command(port, policies, upstream_url, tmp_path / "usage.jsonl"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}", process)
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    lines = [orjson.loads(x) for x in err.splitlines() if x.startswith(b"{")]
    start = next(x for x in lines if x["message"] == "context-proxy starting")
    assert start["mode"] == "keys" and set(start["teams"]) == {"default", "research"}
    assert start["usage_log"] == str(tmp_path / "usage.jsonl")
    assert any(x["level"] == "warning" and "api_key_env" in x["message"] for x in lines)


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "examples/agent_session.json", "--json"],
        ["plan", "examples/agent_session.json"],
        ["check", "--policies", "policies"],
        ["report", "USAGE"],
    ],
)
def test_output_into_a_closed_pipe_exits_quietly(tmp_path: Path, argv: list[str]) -> None:
    # `context-proxy plan ... | head` where head has already gone: the read end is closed
    # before the command prints, so every write meets a broken pipe (whatever the pipe size).
    usage = tmp_path / "usage.jsonl"
    usage.write_bytes(
        orjson.dumps({"ts": "2026-01-01T00:00:00+00:00", "team": "t", "model": "m"}) + b"\n"
    )
    argv = [str(usage) if a == "USAGE" else a for a in argv]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "proxy", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            timeout=60,
            env={k: v for k, v in os.environ.items() if k != "CONTEXT_PROXY_POLICIES"},
        )
    finally:
        os.close(write_end)
    assert b"Traceback" not in done.stderr and b"BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == 141  # as a command killed by SIGPIPE


def test_serve_applies_the_head_timeout_flag(tmp_path: Path, upstream_url: str) -> None:
    import socket

    port = free_port()
    process = subprocess.Popen(
        [
            *serve_command(port, ROOT / "policies", upstream_url, tmp_path / "usage.jsonl"),
            "--head-timeout-s",
            "0.5",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}", process)
        with socket.create_connection(("127.0.0.1", port), timeout=8) as conn:
            conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")  # never finished
            answer = b""
            while chunk := conn.recv(4096):  # the default 10 s would outlast the 8 s timeout
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 408")
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)


def test_plan_reads_no_more_than_the_server_would(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan /dev/zero` used to read without end; now the server's body limit bounds it."""
    assert main(["plan", "/dev/zero"]) == 1
    assert "larger than 32 MB" in capsys.readouterr().err


def test_plan_on_bad_json_says_so_without_a_status_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["plan", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("context-proxy plan: ") and "400" not in err
