"""Everything a request needs, opened once in the app's lifespan and closed at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.metrics import Metrics
from proxy.policy_store import PolicyStore
from proxy.quotas import QuotaBook
from proxy.settings import Settings
from proxy.summaries import Summarizer
from proxy.tokens import TokenCounter
from proxy.upstream import Upstream
from proxy.usage import ThresholdWatch, UsageLog
from proxy.windows import ContextWindows

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
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a background task that the shutdown waits for (or cancels)."""
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


@contextlib.asynccontextmanager
async def open_services(settings: Settings) -> AsyncIterator[Services]:
    """Open the upstream pool, load policies, start the usage writer; undo it all on exit."""
    policies = PolicyStore.load(settings.policies)
    quotas = QuotaBook()
    if settings.usage_log != "-":
        # Rebuilt from the log so a restart forgets no quota spending.
        await asyncio.to_thread(quotas.rebuild, settings.usage_log)
    usage = UsageLog(settings.usage_log)
    await usage.start()
    upstream = Upstream.open()
    services = Services(
        settings=settings,
        policies=policies,
        upstream=upstream,
        counter=TokenCounter(),
        windows=ContextWindows(),
        usage=usage,
        quotas=quotas,
        thresholds=ThresholdWatch(),
        metrics=Metrics(),
        # Stores open on first use: a policy with summaries off never creates a file.
        summaries=Summarizer(upstream, usage, quotas),
    )
    stop = asyncio.Event()
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
        await services.summaries.aclose()
        await services.upstream.close()
        await usage.aclose()
