"""Frozen process settings, from command-line flags and CONTEXT_PROXY_* environment variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from proxy.policy import Policy

DEFAULT_UPSTREAM = "https://api.openai.com/v1"
ENV_PREFIX = "CONTEXT_PROXY_"


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    policies: str = "./policies"
    upstream: str = DEFAULT_UPSTREAM
    # Where /v1/messages goes for a team whose policy names no upstream.anthropic; None:
    # nowhere (such a request is refused: the prompt never leaves for a host nobody named).
    anthropic_upstream: str | None = None
    usage_log: str = "./usage.jsonl"
    workers: int = 1
    max_body_mb: float = 32.0
    state: str | None = None  # e.g. redis://host:6379/0; None keeps all state in the process
    # With `state`: a replica renews its requests' quota holds in Redis from a thread of its
    # own (several times within this); one that dies lets go of them within this many seconds.
    hold_ttl_s: int = 15
    graceful_shutdown_s: float = 30.0
    watch_policies: bool = True
    head_timeout_s: float = 10.0  # time a client has to send a whole request head
    idle_timeout_s: float = 5.0  # keep-alive idle time before the connection is closed
    max_connections: int = 2048  # open client connections per worker process
    inclusion_log: str | None = None  # opt-in JSONL of the x_context ids each request sent
    otel: str | None = None  # an OTLP/HTTP endpoint: traces exported there; None: no tracing

    def openai_base(self, policy: Policy) -> str:
        """Where a team's chat completions and Responses requests go."""
        return policy.upstream.base_url or self.upstream

    def anthropic_base(self, policy: Policy) -> str | None:
        """Where a team's /v1/messages goes: its policy's upstream.anthropic, else
        --anthropic-upstream; None when neither names one."""
        return policy.upstream.anthropic.base_url or self.anthropic_upstream

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 1024 * 1024)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Settings from the environment; unset variables keep their defaults."""
        env = os.environ if environ is None else environ
        base = cls()

        def get(name: str) -> str | None:
            value = env.get(ENV_PREFIX + name)
            return value if value not in (None, "") else None

        return cls(
            host=get("HOST") or base.host,
            port=_int(get("PORT"), base.port, "PORT"),
            policies=get("POLICIES") or base.policies,
            upstream=get("UPSTREAM") or base.upstream,
            anthropic_upstream=get("ANTHROPIC_UPSTREAM"),
            usage_log=get("USAGE_LOG") or base.usage_log,
            workers=_int(get("WORKERS"), base.workers, "WORKERS"),
            max_body_mb=_float(get("MAX_BODY_MB"), base.max_body_mb, "MAX_BODY_MB"),
            state=get("STATE"),
            hold_ttl_s=_int(get("HOLD_TTL_S"), base.hold_ttl_s, "HOLD_TTL_S"),
            graceful_shutdown_s=_float(
                get("GRACEFUL_SHUTDOWN_S"), base.graceful_shutdown_s, "GRACEFUL_SHUTDOWN_S"
            ),
            watch_policies=(get("WATCH_POLICIES") or "1") not in ("0", "false", "no"),
            head_timeout_s=_float(get("HEAD_TIMEOUT_S"), base.head_timeout_s, "HEAD_TIMEOUT_S"),
            idle_timeout_s=_float(get("IDLE_TIMEOUT_S"), base.idle_timeout_s, "IDLE_TIMEOUT_S"),
            max_connections=_int(get("MAX_CONNECTIONS"), base.max_connections, "MAX_CONNECTIONS"),
            inclusion_log=get("INCLUSION_LOG"),
            otel=get("OTEL") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None,
        )

    def to_env(self) -> dict[str, str]:
        """The environment that makes `from_env` rebuild these settings (for worker processes)."""
        env = {
            "HOST": self.host,
            "PORT": str(self.port),
            "POLICIES": self.policies,
            "UPSTREAM": self.upstream,
            "USAGE_LOG": self.usage_log,
            "WORKERS": str(self.workers),
            "MAX_BODY_MB": str(self.max_body_mb),
            "GRACEFUL_SHUTDOWN_S": str(self.graceful_shutdown_s),
            "HOLD_TTL_S": str(self.hold_ttl_s),
            "WATCH_POLICIES": "1" if self.watch_policies else "0",
            "HEAD_TIMEOUT_S": str(self.head_timeout_s),
            "IDLE_TIMEOUT_S": str(self.idle_timeout_s),
            "MAX_CONNECTIONS": str(self.max_connections),
        }
        if self.anthropic_upstream:
            env["ANTHROPIC_UPSTREAM"] = self.anthropic_upstream
        if self.state:
            env["STATE"] = self.state
        if self.inclusion_log:
            env["INCLUSION_LOG"] = self.inclusion_log
        if self.otel:
            env["OTEL"] = self.otel
        return {ENV_PREFIX + k: v for k, v in env.items()}


class SettingsError(ValueError):
    """A flag or environment variable has a value that cannot be used."""


def _int(raw: str | None, default: int, name: str) -> int:
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{ENV_PREFIX}{name} must be an integer, got {raw!r}") from None
    if (value < 1 and name != "PORT") or value < 0:
        raise SettingsError(f"{ENV_PREFIX}{name} must be positive, got {raw!r}")
    return value


def _float(raw: str | None, default: float, name: str) -> float:
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{ENV_PREFIX}{name} must be a number, got {raw!r}") from None
    if not value > 0:
        raise SettingsError(f"{ENV_PREFIX}{name} must be positive, got {raw!r}")
    return value
