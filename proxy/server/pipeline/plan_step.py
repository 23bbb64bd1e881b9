"""Plan step: the request's tokenizer, and its plan, made on the event loop or in a worker
thread, failing open on a bug; the inclusion log's line for a request with ids."""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

from proxy.errors import InvalidRequest, PlanFailed, ProxyError
from proxy.planner import ExtraSummary, Offered, PlanOutcome, plan_request, unplanned
from proxy.policy import Policy
from proxy.server.core.services import Services
from proxy.server.pipeline.body_limits import BYTES_PER_VALUE, check_density
from proxy.server.pipeline.body_shape import shape_problem
from proxy.summaries import Lookup
from proxy.tokens import ChatTokenizer
from proxy.usage import InclusionLog, carries_ids, inclusion_line

T = TypeVar("T")

# Bodies above this are planned in a worker thread so a huge count never stalls the loop
# (a first look at 250 KB of hostile text: ~110 ms here); up to the second, a conversation
# whose counts are cached (a next turn) is planned inline. Whatever the size, a body with
# more tags than PLAN_INLINE_MAX_TAGS goes to the thread: tags are parsed on every turn.
PLAN_IN_THREAD_BYTES = 64 * 1024
PLAN_INLINE_MAX_BYTES = 1024 * 1024
PLAN_INLINE_MAX_TAGS = 64


async def tokenizer_for(
    services: Services, model: str, policy: Policy, upstream: str = ""
) -> ChatTokenizer:
    """The model's tokenizer (an estimate's factor as `upstream`'s answers calibrated it).
    The first use of an encoding loads it (o200k: ~0.3 s), in a worker thread: on the
    event loop it would stall every request in flight."""
    found = services.counter.loaded(model, policy, upstream)
    if found is not None:
        return found
    return await asyncio.to_thread(services.counter.chat_tokenizer, model, policy, upstream)


async def off_loop(
    services: Services, team: str, fn: Callable[..., T], *args: Any, **kwargs: Any
) -> T:
    """`fn` in a worker thread, one heavy plan at a time, the teams waiting served in turn
    (fair_slot.py): planning is Python and holds the GIL, so parallel plans gain nothing,
    and each thread more in line for the GIL delays the event loop (3 at once: /healthz
    0.3-0.8 s; one: well under 0.1 s)."""
    async with services.plan_slots.hold(team):
        return await asyncio.to_thread(fn, *args, **kwargs)


async def parsed_body(
    services: Services,
    team: str,
    raw: bytes,
    parse: Callable[[bytes], T],
    bytes_per_value: int = BYTES_PER_VALUE,
) -> T:
    """`raw` checked for density (body_limits.check_density) and parsed by `parse`; a big
    body in a worker thread, in the heavy slot (the team's turn among the others'): 31 MB
    of small values took 330 ms to parse, all of it the event loop's."""
    if len(raw) > PLAN_INLINE_MAX_BYTES:
        return await off_loop(services, team, _checked_and_parsed, raw, parse, bytes_per_value)
    return _checked_and_parsed(raw, parse, bytes_per_value)


def _checked_and_parsed(raw: bytes, parse: Callable[[bytes], T], bytes_per_value: int) -> T:
    check_density(raw, bytes_per_value)
    return parse(raw)


def tag_marks(raw: bytes) -> int:
    """How many inline tags or x_context fields `raw` may hold (a byte search: ~0.1 ms/MB)."""
    return raw.count(b"<context") + raw.count(b'"x_context"')


def plan_in_thread(
    body: dict[str, Any], tokenizer: ChatTokenizer, size: int, tags: int = 0
) -> bool:
    """Whether to plan in a worker thread, off the event loop: a big body, unless it is
    the next turn of a conversation planned before (its counts cached) and not huge. A
    first look at 300 KB of chat costs ~40 ms, which would stall every other request on
    the loop; a next turn costs ~3 ms, less than the hop to a thread and back adds
    (~0.5 ms) is worth avoiding."""
    if tags > PLAN_INLINE_MAX_TAGS:
        return True
    if size <= PLAN_IN_THREAD_BYTES:
        return False
    messages = body.get("messages")
    return (
        size > PLAN_INLINE_MAX_BYTES
        or not isinstance(messages, list)
        or not tokenizer.seen(messages)
    )


async def plan(
    services: Services,
    policy: Policy,
    body: dict[str, Any],
    tokenizer: ChatTokenizer,
    size: int,
    cached: Lookup | None = None,
    request_id: str = "",
    *,
    fail_open: bool = True,
    tags: int = 0,
    inclusion: bool | None = None,
    reserve: int | Callable[[], int] = 0,
    upstream: str | None = None,
) -> PlanOutcome:
    """`plan_request`, in a worker thread for a big body (see plan_in_thread). A failure
    that is not the request's fault (a bug) forwards the request as it came when
    `fail_open`: an untrimmed request may still fit, and the upstream's own error is better
    than the proxy's. With --inclusion-log, a request that names ids gets its log line;
    `inclusion` says whether this route records one (default: routes that forward, i.e.
    `fail_open`; the plan endpoint forwards nothing, so nothing went in). `reserve`: the
    tokens the recall tool's declaration adds to a request that is trimmed (a callable:
    counted only for a request that is). `upstream`: where it goes, when that upstream
    may have said its window is smaller than the policy's, or said one where none is
    known (length_step.py)."""
    window = services.windows.lookup(body["model"], policy)
    if window is None and upstream is not None:  # known only from its upstream's refusal
        window = services.counter.learned_window(upstream, body["model"])
    if window is None:
        note_unknown_model(services, body["model"], policy.team)
    elif upstream is not None:
        window = services.counter.window_at(window, upstream, body["model"])
    extra: list[ExtraSummary] = cached.found if cached is not None else []
    in_thread = plan_in_thread(body, tokenizer, size, tags)
    try:
        if in_thread:
            outcome = await off_loop(
                services,
                policy.team,
                plan_request,
                body,
                policy,
                tokenizer,
                window,
                offered=Offered(extra, reserve),
                kept=services.kept,
            )
        else:
            offered = Offered(extra, reserve)
            outcome = plan_request(
                body, policy, tokenizer, window, offered=offered, kept=services.kept
            )
    except ProxyError:
        raise
    except Exception as exc:
        # The type and the place only: an exception's message may quote the request.
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        where = f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} in {frame.name}"
        logging.getLogger("context_proxy.plan").error(
            "planning failed: %s at %s (request %s, team %s)",
            type(exc).__name__,
            where,
            request_id,
            policy.team,
        )
        if not fail_open:
            problem = shape_problem(body)
            if problem is not None:  # the body's fault: the client's 400, not a 500
                raise InvalidRequest(problem[0], param=problem[1]) from None
            raise PlanFailed(
                "The proxy failed to plan this request; the failure is logged."
            ) from None
        services.metrics.plan_failures.labels(policy.team).inc()
        return unplanned(body, window, type(exc).__name__)
    # The report is built only for a log that is on and a request with ids: nobody else
    # pays for it (with the log off, not even the scan for ids).
    record = fail_open if inclusion is None else inclusion
    if record and services.settings.inclusion_log and carries_ids(body.get("messages")):
        await record_inclusion(services, outcome, policy.team, body["model"], request_id, in_thread)
    return outcome


MAX_NOTED_MODELS = 1024  # names a client makes up: logged once each, this many at most


def note_unknown_model(services: Services, model: str, team: str) -> None:
    """Say once per name that a model's window is unknown (a typo'd name goes untrimmed)."""
    noted = services.unknown_models
    if model in noted or len(noted) >= MAX_NOTED_MODELS:
        return
    noted.add(model)
    logging.getLogger("context_proxy.plan").warning(
        "model %r (team %s) has no known context window: its requests go untrimmed; give "
        "it models.<name>.context_window or default_context_window in the policy",
        model[:128],
        team,
    )


async def record_inclusion(
    services: Services,
    outcome: PlanOutcome,
    team: str,
    model: str,
    request_id: str,
    in_thread: bool,
) -> None:
    """Queue the request's inclusion line; a failure is logged and never fails the request."""
    try:
        log = await inclusion_log(services)
        if in_thread:  # a big request: a big report, built off the event loop
            line = await off_loop(
                services, team, lambda: inclusion_line(outcome.report, request_id, team, model)
            )
        else:
            line = inclusion_line(outcome.report, request_id, team, model)
        if line is not None:
            log.write(request_id, line)
    except Exception as exc:
        logging.getLogger("context_proxy.inclusion").error(
            "inclusion line of request %s dropped: %s", request_id, type(exc).__name__
        )


async def inclusion_log(services: Services) -> InclusionLog:
    """The process's inclusion log: opened with the services (open_services); services made
    by hand (tests, embedders) get one on first use, closed (flushed) at shutdown."""
    log = services.inclusion
    if log is None:
        assert services.settings.inclusion_log is not None
        log = services.inclusion = InclusionLog(services.settings.inclusion_log)
        services.spawn(_close_at_shutdown(log))
    await log.start()
    return log


async def _close_at_shutdown(log: InclusionLog) -> None:
    """Wait for the shutdown, which cancels background tasks, then flush and close the log
    (the shutdown awaits this task)."""
    try:
        await asyncio.Event().wait()
    finally:
        await log.aclose()
