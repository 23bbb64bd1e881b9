"""Recall step: the proxy's `context_recall` tool in a request it trimmed, and the rounds
of an answer that calls it.

Before the plan: whether the tool may go in this request, and what its declaration costs
(the plan leaves that much room). After it: the tool is declared when the plan left
anything out. An answer that calls only the tool is continued upstream with the model's
message and the tool's answers, served from the request in flight, at most
`recall.rounds` times, and at most recall.MAX_CALLS calls of each answer served: the
answers are made in the heavy slot, off the event loop (a model may call the tool hundreds
of times in one answer). Each round is counted and held as a request is (rounds.py) and
the usage row sums them all. A plain answer is merged into one for the client; a stream is
spliced as it comes (recall/), never held back. A round that cannot go (a limit refuses
it, the upstream fails it) ends the answer with that failure: the client never gets an
answer cut where the model asked for more.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.errors import UpstreamUnreachable
from proxy.planner import PlanOutcome, max_output
from proxy.policy import Policy
from proxy.recall import (
    APIS,
    Api,
    EventSplitter,
    Recallable,
    Round,
    Splicer,
    answer_round,
    declaration,
    may_declare,
)
from proxy.recall.events import add_usage
from proxy.server.core.services import Services
from proxy.server.pipeline.exchange import Exchange
from proxy.server.pipeline.plan_step import off_loop
from proxy.server.pipeline.rounds import Rounds, round_failed
from proxy.tokens import ChatTokenizer
from proxy.upstream import UpstreamResponse


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

    def continued(
        self, sent: bytes, recalled: Round, said: dict[str, Any], tokenizer: ChatTokenizer,
        spent: int,
    ) -> bytes:  # fmt: skip
        """The next round's body: what was sent last (`sent` at first), the model's answer
        (`said`, its recall calls) and the tool's answers, within what the window leaves
        (less `spent`: the model's answers so far). Heavy (a look through the history per
        call, the body read and written whole): run in the heavy slot."""
        body = self.body if self.body is not None else orjson.loads(sent)
        last = self.rounds + 1 >= self.policy.recall.rounds
        room = (self.policy.recall.max_tokens, self.room - self.recalled - spent)
        results, used = answer_round(self.recallable, recalled.calls, room, tokenizer, last)
        self.recalled += used
        self.body = self.api.continued(body, said, results)
        self.rounds += 1
        return orjson.dumps(self.body)


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
    recallable = Recallable(original, outcome.body.get("messages") or [], services.kept.terms)
    services.metrics.recall_declared.labels(ex.policy.team).inc()
    return RecallRun(APIS[ex.api], recallable, ex.policy, outcome.tokens_after, room)


async def plain_rounds(
    services: Services,
    run: RecallRun,
    rounds: Rounds,
    sent: bytes,
    first: bytes,
    tokenizer: ChatTokenizer,
) -> tuple[UpstreamResponse | None, bytes]:
    """The client's answer to a plain request (`sent`) whose answer (`first`) may call the
    tool: continued while it calls only the tool (at most `recall.rounds` times), merged
    into one. A round the upstream answers with an error: that round's answer (the
    upstream's own error, passed on); one that cannot go raises why."""
    try:
        parsed = orjson.loads(first)
    except orjson.JSONDecodeError:
        return None, first
    if not isinstance(parsed, dict):
        return None, first
    said = [parsed]
    usage = parsed.get("usage")
    rounds.used(usage)
    try:
        while True:
            found = run.api.plain_round(said[-1])
            if not found.only_recall or not run.may_continue:
                break
            spent = _completion(found)
            body = await off_loop(
                services, run.policy.team, run.continued, sent, found, said[-1], tokenizer, spent
            )
            await rounds.admit(run.prompt + run.recalled + spent)
            upstream = await rounds.send(body, False)
            more = await upstream.read()
            if not 200 <= upstream.status < 300:
                return upstream, more  # the upstream's own error, as it gave it
            try:
                nxt = orjson.loads(more)
            except orjson.JSONDecodeError:
                nxt = None
            if not isinstance(nxt, dict):
                raise UpstreamUnreachable(
                    "The upstream answered a continuation of this answer with something "
                    "that is not JSON.",
                    code="upstream_invalid_response",
                )
            said.append(nxt)
            usage = add_usage(usage, nxt.get("usage"))
            rounds.used(usage)
    finally:
        _note(services, rounds.ex, run)
    return None, orjson.dumps(run.api.client_answer(said, usage))


async def stream_rounds(
    services: Services,
    run: RecallRun,
    rounds: Rounds,
    sent: bytes,
    first: UpstreamResponse,
    tokenizer: ChatTokenizer,
) -> AsyncGenerator[bytes]:
    """A stream (`sent`) whose answer may call the tool, spliced for the client round
    after round: every event the client should get passes as it arrives. A round that
    cannot go raises why (the relay ends the stream with it)."""
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
            rounds.used(splicer.usage)
            found = splicer.recalled
            if not found.only_recall or not run.may_continue:
                break
            upstream.close()
            spent = _completion(found)
            said = splicer.answer
            body = await off_loop(
                services, run.policy.team, run.continued, sent, found, said, tokenizer, spent
            )
            await rounds.admit(run.prompt + run.recalled + spent)
            upstream = await rounds.send(body, True)
            if upstream.status != 200:
                raise round_failed(upstream.status)
            splicer.next_round()
        yield splicer.closing()
    finally:
        upstream.close()
        rounds.ended()
        _note(services, rounds.ex, run)


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
