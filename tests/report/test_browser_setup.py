"""Test setup: the browser fixture installs chromium with apt when it can, else fails clearly."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests import browser


def fake_apt(calls: list[list[str]], returncode: int = 0) -> Any:
    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        assert kw["timeout"] == browser.INSTALL_TIMEOUT_S
        return subprocess.CompletedProcess(argv, returncode, "", "E: Unable to locate package")

    return run


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    monkeypatch.setattr(browser, "LOCK", tmp_path / "lock")
    monkeypatch.setattr(browser.os, "geteuid", lambda: 0)
    monkeypatch.setattr(
        browser.shutil, "which", lambda name: f"/usr/bin/{name}" if name == "apt-get" else None
    )
    calls: list[list[str]] = []
    monkeypatch.setattr(browser.subprocess, "run", fake_apt(calls))
    return calls


def test_missing_chromium_is_installed_with_apt_once(
    setup: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    found = iter([None, None, "/usr/bin/chromium"])  # before, under the lock, after apt
    monkeypatch.setattr(browser, "find_chromium", lambda: next(found))
    assert browser.obtain_chromium() == "/usr/bin/chromium"
    assert setup == [["sh", "-c", browser.APT]]
    assert "apt-get install -y -qq --no-install-recommends chromium" in browser.APT


def test_a_parallel_run_that_installed_it_first_is_not_repeated(
    setup: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    found = iter([None, "/usr/bin/chromium"])  # installed by another process while we waited
    monkeypatch.setattr(browser, "find_chromium", lambda: next(found))
    assert browser.obtain_chromium() == "/usr/bin/chromium"
    assert setup == []


def test_a_failed_install_fails_the_test_with_apts_message(
    setup: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(browser, "find_chromium", lambda: None)
    monkeypatch.setattr(browser.subprocess, "run", fake_apt(setup, returncode=100))
    with pytest.raises(pytest.fail.Exception, match="Unable to locate package"):
        browser.obtain_chromium()


def test_without_root_it_fails_rather_than_skips(
    setup: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(browser, "find_chromium", lambda: None)
    monkeypatch.setattr(browser.os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.fail.Exception, match="apt-get install chromium"):
        browser.obtain_chromium()
    assert setup == []
