"""Serve start-up: the policy folder rule, credential warnings, one line of what is in force."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from proxy.policy import PolicySet
from proxy.server import Settings
from proxy.tokens import ContextWindows

DEFAULT_FOLDER = "./policies"
log = logging.getLogger("context_proxy.start")


def missing_folder(folder: str, explicit: bool) -> str | None:
    """The error for a policy folder that is not there, or None when it may be used.

    Only the implicit default `./policies` may be missing (the built-in default applies);
    a folder someone named is a mistake to report, not a reason to start in open mode.
    """
    if Path(folder).is_dir():
        return None
    if not explicit:
        return None
    what = "does not exist" if not Path(folder).exists() else "is not a folder"
    return f"{folder}: policy folder {what}"


def credential_warnings(policies: PolicySet, environ: Mapping[str, str] | None = None) -> list[str]:
    """Keyed teams that would reach the upstream with no credentials; FILE:LINE: message.

    With `environ`, also a named variable that is not set there (only the server's own
    environment can tell; `check` may run elsewhere).
    """
    out: list[str] = []
    for policy in policies.all():
        if not policy.keys:
            continue
        where = f"{policy.source}:{_line_of(policy.source, 'keys')}"
        env = policy.upstream.api_key_env
        if not env:
            out.append(
                f"{where}: warning: team {policy.team!r} has keys but no upstream.api_key_env; "
                "its requests reach the upstream without credentials"
            )
        elif environ is not None and not environ.get(env):
            out.append(
                f"{where}: warning: team {policy.team!r}: upstream.api_key_env names {env}, "
                "which is not set; its requests reach the upstream without credentials"
            )
    return out


def model_warnings(policies: PolicySet, windows: ContextWindows) -> list[str]:
    """Models a policy names that neither it (`context_window`) nor litellm's map gives a
    window: their requests would go untrimmed. One line per (policy, name), with the
    nearest known name when one is close (a typo)."""
    out: list[str] = []
    known: list[str] | None = None
    for policy in policies.all():
        for name, model in policy.models.items():
            if model.context_window is not None or windows.registry_window(name) is not None:
                continue
            if policy.default_context_window is not None:
                continue
            known = windows.registry_names() if known is None else known
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            out.append(
                f"{policy.source}:{_line_of(policy.source, 'models')}: warning: team "
                f"{policy.team!r} names model {name!r}{hint}, whose context window is not "
                "known: give it models.<name>.context_window, or its requests go untrimmed"
            )
    return out


def _line_of(source: str, key: str) -> int:
    """The line of a top-level `key:` in a policy file (1 when it cannot be found)."""
    try:
        lines = Path(source).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return 1
    for number, line in enumerate(lines, 1):
        if line.startswith(f"{key}:"):
            return number
    return 1


def safe_url(url: str) -> str:
    """`url` without user, password, query or fragment: safe to log."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<unparsable URL>"
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    return urlunsplit((parts.scheme, host + port, parts.path, "", ""))


def masked_state(state: str | None) -> str:
    """The state backend for a log: 'in-process', or the URL with its password masked."""
    if not state:
        return "in-process"
    try:
        parts = urlsplit(state)
        if parts.password is None:
            return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        user = parts.username or ""
        netloc = f"{user}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    except ValueError:
        return "<unparsable URL>"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def log_start(settings: Settings, policies: PolicySet, environ: Mapping[str, str]) -> None:
    """Warn about missing upstream credentials, then say in one line what is in force."""
    for warning in credential_warnings(policies, environ) + model_warnings(
        policies, ContextWindows()
    ):
        log.warning(warning)
    built_in = not Path(settings.policies).is_dir()
    log.info(
        "context-proxy starting",
        extra={
            "default_upstream": safe_url(settings.upstream),
            "policies": f"built-in default ({settings.policies} is missing)"
            if built_in
            else settings.policies,
            # Each team's upstream: its policy's base URL, or the server's default.
            "teams": {
                p.team: safe_url(p.upstream.base_url or settings.upstream) for p in policies.all()
            },
            # Where each team's /v1/messages goes: none when neither names one.
            "anthropic": {
                p.team: safe_url(url) if (url := settings.anthropic_base(p)) else "none (refused)"
                for p in policies.all()
            },
            "mode": "open" if policies.open_mode else "keys",
            "usage_log": "stdout" if settings.usage_log == "-" else settings.usage_log,
            "workers": settings.workers,
            "state": masked_state(settings.state),
        },
    )
