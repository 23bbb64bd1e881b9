"""`context-proxy plan`: run the server's pipeline on a body and explain it, forwarding nothing."""

from __future__ import annotations

import argparse
import os
import sys

import orjson

from proxy import anthropic
from proxy.cli.plan_view import render_plan
from proxy.errors import ProxyError
from proxy.items import is_responses_body, to_chat
from proxy.planner import plan_request
from proxy.policy import PolicyError, load_policy_dir
from proxy.server import (
    Settings,
    check_chat_body,
    check_messages_body,
    check_responses_body,
    note_previous,
    parse_model_body,
    report_json,
    rewritten,
)
from proxy.tokens import ContextWindows, TokenCounter
from proxy.usage import level_for


def run_plan(args: argparse.Namespace) -> int:
    from proxy.cli.serve_report import missing_folder

    folder = args.policies or os.environ.get("CONTEXT_PROXY_POLICIES") or "./policies"
    problem = missing_folder(
        folder, bool(args.policies or os.environ.get("CONTEXT_PROXY_POLICIES"))
    )
    if problem:
        print(f"context-proxy plan: {problem}", file=sys.stderr)
        return 1
    try:
        policies = load_policy_dir(folder)
    except PolicyError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 1
    policy = policies.by_team(args.team) if args.team else policies.default
    if args.team and policy.team != args.team:
        print(f"context-proxy plan: no policy for team {args.team!r}", file=sys.stderr)
        return 1
    limit = int(Settings().max_body_mb * 1024 * 1024)  # what the server would read
    try:
        if args.request == "-":
            raw = sys.stdin.buffer.read(limit + 1)
        else:
            with open(args.request, "rb") as f:
                raw = f.read(limit + 1)
    except OSError as exc:
        print(f"context-proxy plan: cannot read {args.request}: {exc.strerror}", file=sys.stderr)
        return 1
    if len(raw) > limit:
        print(
            f"context-proxy plan: {args.request} is larger than {limit // (1024 * 1024)} MB, "
            "the most the server reads of a request",
            file=sys.stderr,
        )
        return 1
    try:
        body = parse_model_body(raw)
        # A Responses or Messages body is planned as the neutral chat messages it reads as.
        conv = to_chat(check_responses_body(body)) if is_responses_body(body) else None
        blocks = (
            anthropic.to_chat(check_messages_body(body))
            if anthropic.is_messages_body(body)
            else None
        )
        chat = conv.body if conv is not None else blocks.body if blocks else check_chat_body(body)
        tokenizer = TokenCounter().for_model(body["model"], policy)
        window = ContextWindows().lookup(body["model"], policy)
        outcome = plan_request(chat, policy, tokenizer, window)
    except ProxyError as exc:
        if args.json:
            sys.stdout.buffer.write(exc.body() + b"\n")
        else:
            print(f"context-proxy plan: {exc.message}", file=sys.stderr)
        return 1
    if conv is not None:
        note_previous(body, outcome)
    if args.json:
        answer = (
            {"request": outcome.body, "report": outcome.report.to_json()}
            if conv is None
            else {"request": rewritten(body, conv, outcome), "report": report_json(outcome, body)}
        )
        if blocks is not None:
            request = anthropic.to_messages(body, blocks, outcome.body["messages"])
            answer = {"request": request, "report": outcome.report.to_json()}
        sys.stdout.buffer.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2) + b"\n")
        return 0
    level = level_for(
        outcome.tokens_before / outcome.budget if outcome.budget else None, policy.thresholds
    )
    print(
        f"model {body['model']} · policy {policy.name} ({policy.source}) · "
        f"window {outcome.context_window or 'unknown'} · budget {outcome.budget or 'none'}"
        f"{' · estimated count' if outcome.estimated else ''}"
        f"{' · Responses API body' if conv is not None else ''}"
        f"{' · Messages API body' if blocks is not None else ''}"
    )
    print(
        f"tokens {outcome.tokens_before:,} → {outcome.tokens_after:,} · level {level.value} · "
        f"dropped {outcome.dropped} · truncated {outcome.truncated} · "
        f"deduped {outcome.deduped} · summarized {outcome.summarized}"
    )
    print()
    print(render_plan(outcome.report, color=sys.stdout.isatty() and "NO_COLOR" not in os.environ))
    for problem in outcome.problems:
        print(f"note: {problem}")
    return 0
