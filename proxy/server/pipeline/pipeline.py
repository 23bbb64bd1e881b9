"""The pipeline of every planned API, top to bottom: who is calling, the body and its
limits, the model, the quota, the tokenizer, the plan, the quota again with what the
request may use, the payload, the target, the upstream call (planned again and sent once
more if the upstream refuses it as too long), and the answer relayed or finished, with the
rounds of a recall; any failure on the way a usage row and an error in the API's shape. A
dialect (dialect.py) says what differs between APIs."""

from __future__ import annotations

import asyncio
import time
from functools import partial

from starlette.requests import Request
from starlette.responses import Response

from proxy.policy import Policy
from proxy.server.core import responses
from proxy.server.core.services import Services
from proxy.server.core.shutdown import cut_by_shutdown, shutdown_error
from proxy.server.pipeline.answer_step import finish_plain, relay_stream
from proxy.server.pipeline.auth import resolve_policy
from proxy.server.pipeline.chat_guards import checked_model
from proxy.server.pipeline.dialect import Dialect, Flight
from proxy.server.pipeline.disconnect import cancel_on_disconnect
from proxy.server.pipeline.exchange import Exchange
from proxy.server.pipeline.forward_step import cut_short, failed, summarize_later, traced
from proxy.server.pipeline.length_step import (
    LengthRefusal,
    refit,
    retry_policy,
    within_length,
)
from proxy.server.pipeline.plan_step import parsed_body, plan, tag_marks, tokenizer_for
from proxy.server.pipeline.quota_step import (
    check_quota,
    expected_use,
    hold_in_fleet,
    refuse_unmetered,
)
from proxy.server.pipeline.rate_step import count_request, key_name, take_tokens
from proxy.server.pipeline.recall_step import (
    open_recall,
    plain_rounds,
    recall_reserve,
    stream_rounds,
)
from proxy.server.pipeline.request_body import read_body
from proxy.server.pipeline.rounds import Rounds
from proxy.summaries import SummaryTarget
from proxy.tokens import ChatTokenizer, cost_in_text


async def run(request: Request, dialect: Dialect) -> Response:
    """Serve one request of `dialect`'s API."""
    services: Services = request.app.state.services
    ex = Exchange(services.ids.next())
    if services.tracing is not None:
        ex.trace = services.tracing.begin(request.headers)
    ex.api = dialect.api
    try:
        policies = services.policies.current
        # Who is calling, and where it would go, before reading a byte of the body: a
        # refused caller's body is neither read nor recorded.
        ex.policy = policy = resolve_policy(policies, request.headers)
        await count_request(services, ex, key_name(policy, request.headers))
        base = dialect.upstream_base(services, policy)
        flight = Flight(await read_body(request, services.settings.max_body_bytes))
        raw = flight.raw
        flight.body = body = await parsed_body(services, policy.team, raw, dialect.parse)
        flight.entries = dialect.count_entries(body, len(raw))
        ex.model, ex.stream = checked_model(body), body.get("stream") is True
        check_quota(services, ex)
        background = refuse_unmetered(ex, body)
        ex.count_upstream = base
        tokenizer = await tokenizer_for(services, ex.model, policy, base)
        ex.count_factor = tokenizer.factor
        if tokenizer.estimated:  # only an estimate is calibrated: an exact count skips the walk
            ex.countable = cost_in_text(body)
        flight.big = dialect.is_big(flight)
        flight.neutral = neutral = await dialect.to_neutral(services, policy.team, flight)
        if dialect.summaries:  # summaries made earlier: looked up, never waited for
            flight.cached = await services.summaries.lookup(policy, neutral.body)
        await planned(services, ex, dialect, flight, tokenizer, policy)
        assert flight.outcome is not None
        use = expected_use(flight.outcome.tokens_after, body, policy.quotas.answer_hold_tokens)
        if background:  # its answer is never read here: charged at its limit
            ex.answer_floor = use[1]
        check_quota(services, ex, use)
        await hold_in_fleet(services, ex)
        await take_tokens(services, ex, use)
        flight.payload = await dialect.payload(services, ex, flight)
        target = traced(dialect.target(services, request.headers, policies, policy), ex)
        rounds = Rounds(services, ex, target, body, dialect.usage_of)
        ex.upstream_started = time.perf_counter()
        async with cancel_on_disconnect(request):
            upstream = await services.upstream.send(
                "POST", target.url, target.headers, flight.payload, target.timeouts, ex.stream
            )
            read = None
            if upstream.status == 400:  # refused for length: planned again, sent once more
                again = partial(replanned, services, ex, dialect, flight, tokenizer)
                upstream, read, tokenizer = await within_length(
                    rounds, flight, upstream, tokenizer, again
                )
            ex.answered = 200 <= upstream.status < 300
            if ex.stream and upstream.status == 200 and "event-stream" in upstream.content_type:
                summarize(services, dialect, ex, flight, target, tokenizer)
                tap = dialect.tap(flight)
                spliced = None
                if flight.recall is not None:
                    spliced = stream_rounds(
                        services, flight.recall, rounds, flight.payload, upstream, tokenizer
                    )
                events = relay_stream(
                    services, ex, upstream, tokenizer, tap, dialect.error_event, spliced
                )
                return responses.streamed(200, upstream.headers, events, ex.context_headers())
            answer = read if read is not None else await upstream.read()
            if flight.recall is not None and ex.answered:
                failed_round, answer = await plain_rounds(
                    services, flight.recall, rounds, flight.payload, answer, tokenizer
                )
                upstream = failed_round or upstream  # a later round's error: its answer
        ex.upstream_ended = time.perf_counter()
    except Exception as exc:  # refused, gone, or a bug: a usage row, in the API's shape
        return dialect.answer_failure(failed(services, ex, exc), ex)
    except asyncio.CancelledError:  # cut short (the shutdown's grace is over): its row, a 503
        headers = ex.context_headers()
        cut_short(services, ex)
        if not cut_by_shutdown(services.stopping):
            raise
        return dialect.answer_failure(responses.error(shutdown_error(), headers), ex)
    response = finish_plain(
        services, ex, upstream, answer, tokenizer, dialect.text_of, dialect.usage_of
    )
    if 200 <= response.status_code < 300:
        summarize(services, dialect, ex, flight, target, tokenizer)
    response.keep = flight  # what the request held, freed once the answer is out
    return response


async def planned(
    services: Services,
    ex: Exchange,
    dialect: Dialect,
    flight: Flight,
    tokenizer: ChatTokenizer,
    policy: Policy,
) -> None:
    """The request's plan (to the window its upstream takes), and the recall tool in it
    when the plan left something out."""
    neutral = flight.neutral
    assert neutral is not None
    # Counted only if the plan trims: a request within its budget never gets the tool.
    reserve = partial(
        recall_reserve, services, policy, dialect.api, flight.body, neutral.body, tokenizer
    )
    ex.outcome = flight.outcome = await plan(
        services, policy, neutral.body, tokenizer, len(flight.raw), flight.cached,
        ex.request_id, tags=tag_marks(flight.raw), reserve=reserve, upstream=ex.count_upstream,
    )  # fmt: skip
    flight.recall = open_recall(services, ex, neutral.body, flight.outcome)
    dialect.after_plan(flight)


async def replanned(
    services: Services,
    ex: Exchange,
    dialect: Dialect,
    flight: Flight,
    tokenizer: ChatTokenizer,
    refusal: LengthRefusal,
) -> ChatTokenizer:
    """The request planned again after the upstream refused it as too long, to its count
    and window (length_step.refit), and its payload made anew; the tokenizer it used."""
    assert ex.policy is not None
    window = services.windows.lookup(ex.model, ex.policy)
    fitted = refit(services, ex, tokenizer, refusal, window)
    await planned(services, ex, dialect, flight, fitted, retry_policy(ex.policy))
    flight.payload = await dialect.payload(services, ex, flight)
    return fitted


def summarize(
    services: Services,
    dialect: Dialect,
    ex: Exchange,
    flight: Flight,
    target: SummaryTarget,
    tokenizer: ChatTokenizer,
) -> None:
    """Summaries of what the plan dropped, for a dialect that has them, made in the
    background at the same upstream (as chat completions)."""
    if not dialect.summaries or flight.cached is None or flight.outcome is None:
        return
    assert ex.policy is not None
    where = dialect.summary_target(services, ex.policy, target)
    summarize_later(services, flight.cached, flight.outcome, where, tokenizer)
