"""Everything a request needs, opened once in the app's lifespan and closed at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from proxy.planner import Kept, PlanMemo
from proxy.policy import PolicyStore
from proxy.relevance import TermIndex
from proxy.server.core.books import Books
from proxy.server.core.fair_slot import FairSlot
from proxy.server.core.request_ids import RequestIds
from proxy.server.core.settings import Settings
from proxy.server.core.shutdown import InFlight
from proxy.server.core.warmup import warm_tokenizers
from proxy.summaries import Summarizer, open_store
from proxy.tokens import ContextWindows, TokenCounter
from proxy.upstream import Upstream
from proxy.usage import InclusionLog, Metrics, QuotaBook, ThresholdWatch, UsageLog
from proxy.usage.quotas import micro_usd_of
from proxy.usage.rate_limits import LocalRates

if TYPE_CHECKING:  # redis (~15 MB per worker) is imported only when --state names one
    from proxy.state import SharedState
    from proxy.state.rate_shared import SharedRates
    from proxy.telemetry import Tracing

log = logging.getLogger("context_proxy")


@dataclass
class Services:
    settings: Settings
    policies: PolicyStore
    upstream: Upstream
    counter: TokenCounter
    windows: ContextWindows
    usage: UsageLog
    quotas: QuotaBook
    thresholds: ThresholdWatch
    metrics: Metrics
    summaries: Summarizer
    shared: SharedState | None = None  # with --state: quotas and summaries in Redis
    shared_spend: SharedState | None = None  # and the dollar quotas' spend
    inclusion: InclusionLog | None = None  # with --inclusion-log: ids in and out, per request
    # What planning keeps between requests: history words, conversations' step plans.
    kept: Kept = field(default_factory=lambda: Kept(TermIndex(), PlanMemo()))
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    warmed: asyncio.Event = field(default_factory=asyncio.Event)  # tokenizers preloaded
    plan_slots: FairSlot = field(default_factory=FairSlot)
    ids: RequestIds = field(default_factory=RequestIds)  # x-request-id, per process
    books: Books[Services] = field(default_factory=Books)  # finished requests, booked in batches
    stopping: bool = False  # SIGTERM came: the server drains, then cuts what is left
    in_flight: InFlight = field(default_factory=InFlight)  # planned requests, cut at the end
    tracing: Tracing | None = None  # with an OTLP endpoint: a span per request
    spend: QuotaBook = field(default_factory=QuotaBook)  # millionths of a dollar, per team
    # Rate limits' buckets: the process's, or with --state the fleet's in Redis.
    rates: LocalRates | SharedRates = field(default_factory=LocalRates)
    unknown_models: set[str] = field(default_factory=set)  # logged once: no window known

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a background task that the shutdown waits for (or cancels)."""
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


async def _warm(services: Services) -> None:
    """Preload tokenizers in a worker thread (the event loop stays free), before the
    server accepts its first connection: a request sent the moment the port opened waited
    ~0.3 s for o200k when this ran beside serving. Start-up takes that much longer once
    per process (tiktoken keeps an encoding per process)."""
    try:
        await asyncio.to_thread(warm_tokenizers, services.counter, services.policies.current)
    finally:
        services.warmed.set()


@contextlib.asynccontextmanager
async def open_services(settings: Settings) -> AsyncIterator[Services]:
    """Open the upstream pool, load policies, start the usage writer; undo it all on exit."""
    policies = PolicyStore.load(settings.policies)
    quotas, spend = QuotaBook(), QuotaBook()  # tokens; millionths of a dollar
    metrics = Metrics()
    shared: SharedState | None = None
    shared_spend: SharedState | None = None
    if settings.state:
        from proxy.state import SharedState
        from proxy.state.replicas import SPEND_PREFIX

        # Redis holds every replica's counts; the log (this replica's share) is read only
        # when Redis cannot be reached at start.
        shared = await SharedState.open(
            settings.state, quotas, metrics, usage_log=settings.usage_log,
            hold_ttl_s=settings.hold_ttl_s,
        )  # fmt: skip
        shared_spend = await SharedState.open(
            settings.state, spend, metrics, usage_log=settings.usage_log,
            prefix=SPEND_PREFIX, amount=micro_usd_of, hold_ttl_s=settings.hold_ttl_s,
        )  # fmt: skip
    elif settings.usage_log != "-":
        # Rebuilt from the log so a restart forgets no quota spending.
        await asyncio.to_thread(quotas.rebuild, settings.usage_log)
    usage = UsageLog(settings.usage_log)
    await usage.start()
    inclusion = InclusionLog(settings.inclusion_log) if settings.inclusion_log else None
    if inclusion is not None:
        await inclusion.start()
    upstream = Upstream.open()
    windows = ContextWindows()
    services = Services(
        settings=settings,
        policies=policies,
        upstream=upstream,
        counter=TokenCounter(),
        windows=windows,
        usage=usage,
        quotas=quotas,
        spend=spend,
        thresholds=ThresholdWatch(),
        metrics=metrics,
        # Stores open on first use: a policy with summaries off never creates a file.
        summaries=Summarizer(
            upstream,
            usage,
            quotas,
            store_opener=shared.open_summary_store if shared else open_store,
            prices=windows.prices,
        ),
        shared=shared,
        shared_spend=shared_spend,
        inclusion=inclusion,
    )
    if shared is not None:
        from proxy.state.rate_shared import SharedRates

        shared.counter = services.counter  # estimated models' factors, shared by the fleet
        services.rates = SharedRates(shared.client, shared.health)
    if shared_spend is None and settings.usage_log != "-":  # this replica's, from its log
        await asyncio.to_thread(services.spend.rebuild, settings.usage_log, amount=micro_usd_of)
    if settings.otel:
        from proxy.telemetry import open_tracing

        services.tracing = open_tracing(settings.otel)
    metrics.watch_usage_log(usage)
    await _warm(services)  # before the first request, not beside it
    stop = asyncio.Event()
    if shared is not None:
        services.spawn(shared.run(stop))
    if shared_spend is not None:
        services.spawn(shared_spend.run(stop))
    if settings.watch_policies:
        services.spawn(policies.watch(stop))
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGHUP, policies.reload)
    try:
        yield services
    finally:
        stop.set()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(signal.SIGHUP)
        for task in list(services.tasks):
            task.cancel()
        await asyncio.gather(*services.tasks, return_exceptions=True)
        services.books.drain()  # every finished request's row, before the log closes
        await services.summaries.aclose()
        await services.rates.aclose(1.0)  # settled rate limits sent before Redis closes
        if shared is not None:
            await shared.aclose()  # hands the last unsent quota tokens to Redis
        if shared_spend is not None:
            await shared_spend.aclose()
        await services.upstream.close()
        # The rows are on disk before the exporter gets its (bounded) last word: a collector
        # that hangs delays a stop by EXPORT_TIMEOUT_S at most and never costs a row.
        if inclusion is not None:
            await inclusion.aclose()
        await usage.aclose()
        if services.tracing is not None:
            await asyncio.to_thread(services.tracing.close)  # exports the last spans
