"""Commands: serve, plan, check, keys, report."""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys
from collections.abc import Sequence

from proxy.server import Settings, SettingsError


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # inside the try: a reader that left must not fail the exit flush
        return code
    except SettingsError as exc:
        print(f"context-proxy: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _stdout_closed()


def _stdout_closed() -> int:
    """The reader of stdout went away (`plan ... | head`): stop quietly, like a SIGPIPE."""
    # Python flushes stdout again at exit; pointing it at /dev/null keeps that flush quiet.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def build_parser() -> argparse.ArgumentParser:
    from proxy.report import add_report_arguments
    from proxy.report import run as run_report

    parser = argparse.ArgumentParser(
        prog="context-proxy",
        description="OpenAI-compatible proxy that fits chat requests into the context budget.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the proxy server")
    serve.add_argument("--host", help="bind address (CONTEXT_PROXY_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (CONTEXT_PROXY_PORT, default 8080)")
    serve.add_argument(
        "--policies", help="policy folder (CONTEXT_PROXY_POLICIES, default ./policies)"
    )
    serve.add_argument("--upstream", help="upstream base URL (CONTEXT_PROXY_UPSTREAM)")
    serve.add_argument(
        "--anthropic-upstream",
        help="where /v1/messages goes for teams whose policy names no upstream.anthropic, "
        "e.g. https://api.anthropic.com (CONTEXT_PROXY_ANTHROPIC_UPSTREAM; default: refused)",
    )
    serve.add_argument(
        "--usage-log", help="usage log path, '-' for stdout (CONTEXT_PROXY_USAGE_LOG)"
    )
    serve.add_argument("--workers", type=int, help="worker processes (CONTEXT_PROXY_WORKERS)")
    serve.add_argument(
        "--max-body-mb", type=float, help="body size limit (CONTEXT_PROXY_MAX_BODY_MB)"
    )
    serve.add_argument(
        "--state", help="shared state, e.g. redis://host:6379/0 (CONTEXT_PROXY_STATE)"
    )
    serve.add_argument(
        "--graceful-shutdown-s",
        type=float,
        help="seconds SIGTERM waits for requests in flight (CONTEXT_PROXY_GRACEFUL_SHUTDOWN_S)",
    )
    serve.add_argument(
        "--head-timeout-s",
        type=float,
        help="seconds a client has to send a request head (CONTEXT_PROXY_HEAD_TIMEOUT_S, 10)",
    )
    serve.add_argument(
        "--idle-timeout-s",
        type=float,
        help="keep-alive idle seconds (CONTEXT_PROXY_IDLE_TIMEOUT_S, default 5)",
    )
    serve.add_argument(
        "--max-connections",
        type=int,
        help="open connections per worker (CONTEXT_PROXY_MAX_CONNECTIONS, default 2048)",
    )
    serve.add_argument(
        "--inclusion-log",
        help="opt-in JSONL of the x_context ids each request sent, with tokens and action "
        "(CONTEXT_PROXY_INCLUSION_LOG; off by default)",
    )
    serve.add_argument(
        "--otel",
        nargs="?",
        const="http://localhost:4318",
        help="export OpenTelemetry traces to this OTLP/HTTP endpoint (CONTEXT_PROXY_OTEL or "
        "OTEL_EXPORTER_OTLP_ENDPOINT; default http://localhost:4318; needs the `otel` extra)",
    )
    serve.add_argument("--log-level", default=os.environ.get("CONTEXT_PROXY_LOG_LEVEL", "info"))
    serve.set_defaults(func=serve_command)

    plan = commands.add_parser("plan", help="show what the proxy would do to a request body")
    plan.add_argument("request", help="a chat-completion body (JSON file, '-' for stdin)")
    plan.add_argument("--policies", help="policy folder (default ./policies)")
    plan.add_argument("--team", help="plan with this team's policy (default: the default policy)")
    plan.add_argument("--json", action="store_true", help='print {"request": ..., "report": ...}')
    plan.set_defaults(func=plan_command)

    check = commands.add_parser("check", help="validate policy files")
    check.add_argument("--policies", help="policy folder (default ./policies)")
    check.set_defaults(func=check_command)

    from proxy.cli.keys import add_keys_arguments

    add_keys_arguments(commands)

    report = commands.add_parser("report", help="usage totals from a usage log")
    add_report_arguments(report)
    report.set_defaults(func=run_report)
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    """Flags override environment variables, which override defaults."""
    env = dict(os.environ)
    for flag, name in (
        ("host", "HOST"),
        ("port", "PORT"),
        ("policies", "POLICIES"),
        ("upstream", "UPSTREAM"),
        ("anthropic_upstream", "ANTHROPIC_UPSTREAM"),
        ("usage_log", "USAGE_LOG"),
        ("workers", "WORKERS"),
        ("max_body_mb", "MAX_BODY_MB"),
        ("state", "STATE"),
        ("graceful_shutdown_s", "GRACEFUL_SHUTDOWN_S"),
        ("head_timeout_s", "HEAD_TIMEOUT_S"),
        ("idle_timeout_s", "IDLE_TIMEOUT_S"),
        ("max_connections", "MAX_CONNECTIONS"),
        ("inclusion_log", "INCLUSION_LOG"),
        ("otel", "OTEL"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            env["CONTEXT_PROXY_" + name] = str(value)
    return Settings.from_env(env)


def serve_command(args: argparse.Namespace) -> int:
    import uvicorn

    from proxy.cli.serve_report import log_start, missing_folder
    from proxy.policy import PolicyError, load_policy_dir
    from proxy.server import configure_logging, uvicorn_options

    settings = _settings(args)
    configure_logging(args.log_level)
    problem = missing_folder(settings.policies, _named_folder(args))
    if problem:
        print(f"context-proxy serve: {problem}", file=sys.stderr)
        return 1
    try:
        policies = load_policy_dir(settings.policies)  # refuse a bad set, with file:line
    except PolicyError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 1
    problem = _unwritable(settings.inclusion_log)
    if problem:
        print(f"context-proxy serve: {problem}", file=sys.stderr)
        return 1
    if settings.workers > 1 and not settings.state:
        quotas = any(p.quotas.daily_tokens or p.quotas.monthly_tokens for p in policies.all())
        # Each worker process counts on its own; only --state shares counts between them.
        logging.getLogger("context_proxy").warning(
            "%d workers without --state: quotas%s and /metrics are per worker process; "
            "use --state redis://... to share them",
            settings.workers,
            " (configured!)" if quotas else "",
        )
    log_start(settings, policies, os.environ)
    # Worker processes rebuild the settings from the environment.
    os.environ.update(settings.to_env())
    os.environ["CONTEXT_PROXY_LOG_LEVEL"] = args.log_level
    # uvicorn re-raises the signal that stopped it once shutdown is done; a no-op handler
    # turns that into a plain return, so a graceful SIGTERM exits 0.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: None)
    uvicorn.run(
        "proxy.server.app.app:app_from_env",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        loop="uvloop",
        **uvicorn_options(settings),  # httptools, with head/idle timeouts and a connection cap
        lifespan="on",
        access_log=False,  # request lines may carry query strings with secrets
        log_config=None,
        timeout_graceful_shutdown=math.ceil(settings.graceful_shutdown_s),
        server_header=False,
        # X-Forwarded-* rewriting is a per-request middleware the proxy has no use for.
        proxy_headers=False,
    )
    return 0


def _unwritable(path: str | None) -> str | None:
    """Why the inclusion log cannot be appended to, checked at start (not on a request)."""
    if not path or path == "-":
        return None
    try:
        with open(path, "ab"):
            pass
    except OSError as exc:
        return f"--inclusion-log {path}: {exc.strerror or type(exc).__name__}"
    return None


def _named_folder(args: argparse.Namespace) -> bool:
    """Whether the policy folder was named (flag or variable), so it must exist."""
    return bool(args.policies or os.environ.get("CONTEXT_PROXY_POLICIES"))


def check_command(args: argparse.Namespace) -> int:
    from proxy.cli.serve_report import credential_warnings, missing_folder, model_warnings
    from proxy.policy import PolicyError, load_policy_dir
    from proxy.tokens import ContextWindows

    folder = args.policies or os.environ.get("CONTEXT_PROXY_POLICIES") or "./policies"
    problem = missing_folder(folder, _named_folder(args))
    if problem:
        print(problem)
        return 1
    try:
        policies = load_policy_dir(folder)
    except PolicyError as exc:
        for problem in exc.problems:
            print(problem)
        return 1
    for warning in credential_warnings(policies) + model_warnings(policies, ContextWindows()):
        print(warning)
    teams = ", ".join(f"{p.team} ({p.source})" for p in policies.all())
    print(f"ok: {len(policies.all())} polic{'y' if len(policies.all()) == 1 else 'ies'}: {teams}")
    return 0


def plan_command(args: argparse.Namespace) -> int:
    from proxy.cli.plan import run_plan

    return run_plan(args)
