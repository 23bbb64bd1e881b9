"""Settings from flags and environment; keys, teams and upstream credentials."""

from __future__ import annotations

import pytest

from proxy.errors import Unauthorized
from proxy.policy.model import Policy, UpstreamPolicy, hash_key
from proxy.policy.policy_set import PolicySet
from proxy.server.core.settings import Settings, SettingsError
from proxy.server.pipeline.auth import bearer_token, resolve_policy, upstream_authorization


def test_settings_defaults_match_contract() -> None:
    s = Settings.from_env({})
    assert (s.host, s.port, s.policies, s.upstream, s.usage_log, s.workers) == (
        "127.0.0.1",
        8080,
        "./policies",
        "https://api.openai.com/v1",
        "./usage.jsonl",
        1,
    )
    assert s.max_body_bytes == 32 * 1024 * 1024


def test_settings_from_environment_and_back() -> None:
    env = {
        "CONTEXT_PROXY_HOST": "0.0.0.0",
        "CONTEXT_PROXY_PORT": "9001",
        "CONTEXT_PROXY_WORKERS": "3",
        "CONTEXT_PROXY_MAX_BODY_MB": "1.5",
        "CONTEXT_PROXY_USAGE_LOG": "-",
        "CONTEXT_PROXY_UPSTREAM": "http://u/v1",
        "CONTEXT_PROXY_POLICIES": "/p",
    }
    s = Settings.from_env(env)
    assert (s.host, s.port, s.workers, s.usage_log, s.upstream, s.policies) == (
        "0.0.0.0",
        9001,
        3,
        "-",
        "http://u/v1",
        "/p",
    )
    assert s.max_body_bytes == int(1.5 * 1024 * 1024)
    assert Settings.from_env(s.to_env()) == s


@pytest.mark.parametrize(
    ("name", "value"), [("PORT", "http"), ("WORKERS", "0"), ("MAX_BODY_MB", "-1")]
)
def test_bad_settings_are_refused(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env({"CONTEXT_PROXY_" + name: value})


def test_bearer_token() -> None:
    assert bearer_token({"authorization": "Bearer abc"}) == "abc"
    assert bearer_token({"authorization": "bearer  abc "}) == "abc"
    assert bearer_token({"authorization": "Basic abc"}) is None
    assert bearer_token({}) is None


def keyed() -> PolicySet:
    research = Policy(
        name="research",
        team="research",
        keys=(hash_key("k-research"),),
        upstream=UpstreamPolicy(api_key_env="UP_KEY"),
    )
    return PolicySet(default=Policy(), policies=(research,))


def test_open_mode_passes_client_authorization() -> None:
    policies = PolicySet(default=Policy())
    policy = resolve_policy(policies, {})
    assert policy.team == "default"
    assert (
        upstream_authorization(policies, policy, {"authorization": "Bearer sk-1"}, {})
        == "Bearer sk-1"
    )
    assert upstream_authorization(policies, policy, {}, {}) is None


def test_key_mode_resolves_team_and_swaps_credentials() -> None:
    policies = keyed()
    with pytest.raises(Unauthorized):
        resolve_policy(policies, {})
    with pytest.raises(Unauthorized):
        resolve_policy(policies, {"authorization": "Bearer nope"})
    policy = resolve_policy(policies, {"authorization": "Bearer k-research"})
    assert policy.team == "research"
    headers = {"authorization": "Bearer k-research"}
    assert upstream_authorization(policies, policy, headers, {"UP_KEY": "sk-up"}) == "Bearer sk-up"
    # The proxy key itself never goes upstream, even when no upstream key is configured.
    assert upstream_authorization(policies, policy, headers, {}) is None


def test_admin_keys() -> None:
    admin = Policy(admin_keys=(hash_key("adm"),))
    policies = PolicySet(default=admin)
    assert policies.admin_required
    assert (
        policies.is_admin("adm") and not policies.is_admin("other") and not policies.is_admin(None)
    )


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.cli.main import _settings, build_parser

    monkeypatch.setenv("CONTEXT_PROXY_PORT", "9001")
    monkeypatch.setenv("CONTEXT_PROXY_GRACEFUL_SHUTDOWN_S", "12")
    args = build_parser().parse_args(["serve", "--port", "9100", "--graceful-shutdown-s", "2.5"])
    settings = _settings(args)
    assert settings.port == 9100
    assert settings.graceful_shutdown_s == 2.5
    assert _settings(build_parser().parse_args(["serve"])).graceful_shutdown_s == 12


def test_connection_settings_from_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.cli.main import _settings, build_parser

    defaults = Settings.from_env({})
    assert (defaults.head_timeout_s, defaults.idle_timeout_s, defaults.max_connections) == (
        10.0,
        5.0,
        2048,
    )
    env = {
        "CONTEXT_PROXY_HEAD_TIMEOUT_S": "2.5",
        "CONTEXT_PROXY_IDLE_TIMEOUT_S": "7",
        "CONTEXT_PROXY_MAX_CONNECTIONS": "64",
    }
    s = Settings.from_env(env)
    assert (s.head_timeout_s, s.idle_timeout_s, s.max_connections) == (2.5, 7.0, 64)
    assert Settings.from_env(s.to_env()) == s
    monkeypatch.setenv("CONTEXT_PROXY_MAX_CONNECTIONS", "64")
    args = build_parser().parse_args(
        ["serve", "--head-timeout-s", "3", "--idle-timeout-s", "1.5", "--max-connections", "9"]
    )
    s = _settings(args)
    assert (s.head_timeout_s, s.idle_timeout_s, s.max_connections) == (3.0, 1.5, 9)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        *[("HEAD_TIMEOUT_S", "0"), ("IDLE_TIMEOUT_S", "x"), ("MAX_CONNECTIONS", "0")],
        *[("MAX_CONNECTIONS", "1.5"), ("HEAD_TIMEOUT_S", "-1")],
    ],
)
def test_bad_connection_settings_are_refused(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env({"CONTEXT_PROXY_" + name: value})
