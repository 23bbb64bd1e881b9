"""Recall step: the proxy's `context_recall` tool in a request it trimmed, and the rounds
of an answer that calls it.

Before the plan: whether the tool may go in this request, and what its declaration costs
(the plan leaves that much room). After it: the tool is declared when the plan left
anything out. An answer that calls only the tool is continued upstream with the model's
message and the tool's answers, served from the request in flight, at most
`recall.rounds` times; each round is held against the team's quota before it goes, and the
usage row sums them all. A plain answer is merged into one for the client; a stream is
spliced as it comes (recall/), never held back.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.errors import ProxyError, QuotaExceeded
from proxy.planner import PlanOutcome, max_output
from proxy.policy import Policy
from proxy.recall import (
    APIS,
    Api,
    EventSplitter,
    Recallable,
    Round,
    Splicer,
    add_usage,
    answer,
    declaration,
    may_declare,
)
from proxy.server.core.services import Services
from proxy.server.pipeline.exchange import Exchange
from proxy.server.pipeline.quota_step import check_quota, expected_use
from proxy.summaries import SummaryTarget
from proxy.tokens import ChatTokenizer
from proxy.upstream import UpstreamResponse

NO_ROOM = "[context-proxy: the context window has no room left for a recall in this answer]"
LAST = "[context-proxy: no more recalls in this answer: answer with what you have]"
_MIN_ROOM = 64  # tokens: a recall smaller than this holds nothing worth the round


@dataclass(slots=True)
class RecallRun:
    """One request's recall: the API's rules, what was left out, and the rounds so far."""

    api: Api
    recallable: Recallable
    policy: Policy
    prompt: int  # the forwarded prompt's tokens, the tool's declaration included
    room: int  # tokens the window leaves past the forwarded prompt and the answer's limit
    body: dict[str, Any] | None = None  # what was sent upstream last, read when continued
    rounds: int = 0
    recalled: int = 0  # tokens of the tool's answers

    @property
    def may_continue(self) -> bool:
        return self.rounds < self.policy.recall.rounds

    def results(
        self, recalled: Round, tokenizer: ChatTokenizer, spent: int
    ) -> list[tuple[str, str]]:
        """The tool's answer to each call of a round, within what the window leaves (less
        `spent`: the rounds' answers so far); the last round allowed says it is."""
        out: list[tuple[str, str]] = []
        last = self.rounds + 1 >= self.policy.recall.rounds
        for call in recalled.calls:
            room = min(self.policy.recall.max_tokens, self.room - self.recalled - spent)
            if room < _MIN_ROOM:
                text = NO_ROOM
            else:
                text = answer(self.recallable, call.arguments, room, tokenizer).text
            if last:
                text += "\n" + LAST
            self.recalled += tokenizer.count_text(text)
            out.append((call.id, text))
        return out


def recall_reserve(
    services: Services, policy: Policy, api: str, body: dict[str, Any], neutral: dict[str, Any],
    tokenizer: ChatTokenizer,
) -> int:  # fmt: skip
    """Tokens the tool's declaration adds to this request; 0 when it may not go in it (the
    policy, the client's own tool of that name or its tool_choice, an answer the proxy
    could not continue: several choices, an assistant prefill)."""
    mode = policy.recall.tool
    if mode == "off" or api not in APIS:
        return 0
    model = str(body.get("model") or "")
    if mode == "auto" and not body.get("tools") and not services.windows.takes_tools(model):
        return 0
    if not may_declare(body, api) or body.get("n") not in (None, 1):
        return 0
    messages = body.get("messages")
    if api == "messages" and isinstance(messages, list) and messages:
        last = messages[-1]
        if isinstance(last, dict) and last.get("role") == "assistant":
            return 0
    rest = {k: v for k, v in neutral.items() if k != "messages"}
    tools = rest.get("tools")
    declared = {**rest, "tools": [*(tools if isinstance(tools, list) else ()), declaration("chat")]}
    return max(
        1, tokenizer.count_request_overhead(declared) - tokenizer.count_request_overhead(rest)
    )


def recall_declared(outcome: PlanOutcome) -> bool:
    """Whether the recall tool goes in the request `outcome` plans: its plan left something
    out and kept room for the tool (planner.held_back: its tokens are counted in)."""
    return outcome.held > 0


def open_recall(
    services: Services, ex: Exchange, neutral: dict[str, Any], outcome: PlanOutcome
) -> RecallRun | None:
    """The request's recall when the tool goes in it (recall_declared); None otherwise."""
    if not recall_declared(outcome):
        return None
    assert ex.policy is not None
    # What the window leaves past the prompt and the answer: the answer's limit when the
    # request sets one, else half of what is left (the model must still have room to answer).
    left = (outcome.context_window or 0) - outcome.tokens_after - 16
    limit = max_output(neutral)
    room = left - limit if limit is not None else left // 2
    original = neutral.get("messages") or []
    recallable = Recallable(original, outcome.body.get("messages") or [])
    services.metrics.recall_declared.labels(ex.policy.team).inc()
    return RecallRun(APIS[ex.api], recallable, ex.policy, outcome.tokens_after, room)


def _held(services: Services, ex: Exchange, run: RecallRun, spent: int) -> bool:
    """Whether the next round may go: held against the team's quota first (its prompt as
    far as it is known, and its answer limit)."""
    prompt = run.prompt + run.recalled + spent
    hold = run.policy.quotas.answer_hold_tokens
    try:
        check_quota(services, ex, expected_use(prompt, run.body or {}, hold))
    except QuotaExceeded:
        return False
    return True


async def plain_rounds(
    services: Services,
    ex: Exchange,
    run: RecallRun,
    sent: tuple[bytes, SummaryTarget],
    first: bytes,
    tokenizer: ChatTokenizer,
) -> bytes:
    """The client's answer to a plain request whose answer may call the tool: continued
    while it calls only the tool (at most `recall.rounds` times), merged into one."""
    try:
        parsed = orjson.loads(first)
    except orjson.JSONDecodeError:
        return first
    if not isinstance(parsed, dict):
        return first
    payload, target = sent
    rounds = [parsed]
    usage = parsed.get("usage")
    while True:
        found = run.api.plain_round(rounds[-1])
        if not found.only_recall or not run.may_continue:
            break
        spent = _completion(found)
        if not _held(services, ex, run, spent):
            break
        run.body = run.body if run.body is not None else orjson.loads(payload)
        results = run.results(found, tokenizer, spent)
        run.body = run.api.continued(run.body, rounds[-1], results)
        run.rounds += 1
        try:
            upstream = await services.upstream.send(
                "POST", target.url, target.headers, orjson.dumps(run.body), target.timeouts, False
            )
            more = await upstream.read()
        except ProxyError:  # unreachable, timed out: the answer so far
            break
        if not 200 <= upstream.status < 300:
            break  # the answer so far, rather than a failure the client never asked for
        try:
            nxt = orjson.loads(more)
        except orjson.JSONDecodeError:
            break
        if not isinstance(nxt, dict):
            break
        rounds.append(nxt)
        usage = add_usage(usage, nxt.get("usage"))
    _note(services, ex, run)
    return orjson.dumps(run.api.client_answer(rounds, usage))


async def stream_rounds(
    services: Services,
    ex: Exchange,
    run: RecallRun,
    sent: tuple[bytes, SummaryTarget],
    first: UpstreamResponse,
    tokenizer: ChatTokenizer,
) -> AsyncIterator[bytes]:
    """A stream whose answer may call the tool, spliced for the client round after round:
    every event the client should get passes as it arrives."""
    payload, target = sent
    splicer: Splicer = run.api.splicer()
    upstream = first
    try:
        while True:
            split = EventSplitter()
            async for chunk in upstream.chunks():
                for event in split.feed(chunk):
                    out = splicer.feed(event)
                    if out:
                        yield out
            rest = split.flush()
            if rest.strip():
                out = splicer.feed(rest)
                if out:
                    yield out
            found = splicer.recalled
            if not found.only_recall or not run.may_continue:
                break
            spent = _completion(found)
            if not _held(services, ex, run, spent):
                break
            run.body = run.body if run.body is not None else orjson.loads(payload)
            results = run.results(found, tokenizer, spent)
            run.body = run.api.continued(run.body, splicer.answer, results)
            run.rounds += 1
            upstream.close()
            try:
                upstream = await services.upstream.send(
                    "POST",
                    target.url,
                    target.headers,
                    orjson.dumps(run.body),
                    target.timeouts,
                    True,
                )
            except ProxyError:  # unreachable, timed out: the answer so far
                break
            if upstream.status != 200:
                break
            splicer.next_round()
        yield splicer.closing()
    finally:
        upstream.close()
        ex.upstream_ended = time.perf_counter()
        _note(services, ex, run)


def _completion(found: Round) -> int:
    usage = found.usage if isinstance(found.usage, dict) else {}
    for key in ("completion_tokens", "output_tokens"):
        if type(usage.get(key)) is int:
            return int(usage[key])
    return 256  # a round that said nothing of its size: a few hundred tokens at most


def _note(services: Services, ex: Exchange, run: RecallRun) -> None:
    ex.recall_rounds, ex.recalled_tokens = run.rounds, run.recalled
    if run.rounds and ex.policy is not None:
        services.metrics.recall_rounds.labels(ex.policy.team).inc(run.rounds)
