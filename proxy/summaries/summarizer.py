"""Summaries: the cache the request path reads, and the off-path summarizer that fills it.

The request path calls `lookup` (memory first, then one `get_many` for the rest) and, once
the response has started, `schedule`; everything that costs time or money happens in
background tasks whose errors are contained, logged and retried later with backoff.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.planner import ExtraSummary, PlanOutcome
from proxy.policy import Policy, SummaryPolicy
from proxy.summaries.calls import SpendBook, SummaryCall, SummaryFailed, SummaryTarget, call_summary
from proxy.summaries.spans import Span, chunk_spans, dropped_spans, prompt_messages, settings_tag
from proxy.summaries.store import DEFAULT_URL, SummaryStore, open_store
from proxy.tokens import Prices
from proxy.types import Tokenizer
from proxy.upstream import Upstream
from proxy.usage import QuotaBook, UsageLog

log = logging.getLogger("context_proxy.summaries")

CACHE_SIZE = 2048  # summaries held in memory (each at most `max_tokens`)
ABSENT_TTL_S = 30.0  # a key the store lacked is not asked for again this soon
FAILURE_MEMORY = 1024  # failed keys remembered for backoff; the oldest are forgotten
BACKOFF_BASE_S = 30.0
BACKOFF_CAP_S = 3600.0
QUEUE_PER_SLOT = 4  # tasks a team may have waiting per unit of concurrency
STORE_RETRY_S = 60.0  # a store that failed to open is not tried again sooner
LOCK_MARGIN_S = 60.0  # a lock outlives the summary call's own timeout by this much

Spawn = Callable[[Coroutine[Any, Any, None]], None]


@dataclass(slots=True)
class Lookup:
    """What `lookup` found for one request; handed back to `schedule`."""

    policy: Policy | None = None
    model: str = ""
    messages: Sequence[Any] = ()
    spans: list[Span] = field(default_factory=list)
    found: list[ExtraSummary] = field(default_factory=list)


class Summarizer:
    def __init__(
        self,
        upstream: Upstream,
        usage: UsageLog,
        quotas: QuotaBook,
        *,
        store_opener: Callable[[str | None], Awaitable[SummaryStore]] = open_store,
        cache_size: int = CACHE_SIZE,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        prices: Callable[[str], Prices | None] | None = None,
    ) -> None:
        self.upstream, self.usage, self.quotas = upstream, usage, quotas
        self.clock = clock  # an attribute, so tests can move time forward
        self._prices = prices  # a model's prices (the usage row's cost), when known
        self.spend = SpendBook()
        self.stats: Counter[str] = Counter()  # what happened, for tests and debugging
        self._open = store_opener
        self._rng = rng or random.Random()
        self._cache_size = cache_size
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._absent: OrderedDict[str, float] = OrderedDict()  # key -> ask the store again at
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()  # (count, retry at)
        self._inflight: set[str] = set()
        self._pending: dict[str, int] = {}  # team -> tasks waiting or running
        self._gates: dict[str, tuple[int, asyncio.Semaphore]] = {}
        self._stores: dict[str, SummaryStore] = {}
        self._store_down: dict[str, float] = {}  # url -> do not try to open before
        self._opening = asyncio.Lock()

    async def lookup(self, policy: Policy, body: dict[str, Any]) -> Lookup:
        """Cached summaries of this request's older spans; never raises, never waits on a
        summary being made."""
        cfg = policy.summaries
        messages = body.get("messages")
        if not cfg.enabled or not isinstance(messages, list):
            return Lookup()
        model = cfg.model or str(body.get("model"))
        out = Lookup(policy, model, messages)
        try:
            tag = settings_tag(policy.team, policy.upstream.base_url or "", model, cfg.max_tokens)
            out.spans = chunk_spans(messages, cfg.chunk_turns, tag)
            texts = await self._texts([s.key for s in out.spans], cfg)
        except Exception:
            log.exception("summary lookup failed; the request goes on without summaries")
            return out
        out.found = [
            ExtraSummary(s.start, s.end, texts[s.key], s.key) for s in out.spans if s.key in texts
        ]
        self.stats["hits"] += len(out.found)
        return out

    async def _texts(self, keys: list[str], cfg: SummaryPolicy) -> dict[str, str]:
        now = self.clock()
        texts: dict[str, str] = {}
        missing: list[str] = []
        for key in keys:
            text = self._cache.get(key)
            if text is not None:
                self._cache.move_to_end(key)
                texts[key] = text
            elif self._absent.get(key, 0.0) <= now:
                missing.append(key)
        if not missing:
            return texts
        try:
            got = await (await self._store(cfg.store)).get_many(missing)
        except Exception as exc:
            log.warning("summary store read failed: %s", type(exc).__name__)
            got = {}
        for key in missing:
            if key in got:
                self._remember(key, got[key])
                texts[key] = got[key]
            else:
                self._absent[key] = now + ABSENT_TTL_S
                self._absent.move_to_end(key)
                while len(self._absent) > self._cache_size * 2:
                    self._absent.popitem(last=False)
        return texts

    def schedule(
        self,
        lookup: Lookup,
        outcome: PlanOutcome,
        target: SummaryTarget,
        tokenizer: Tokenizer,
        spawn: Spawn,
    ) -> None:
        """After the response started: summarize, in the background, what the plan dropped."""
        if lookup.policy is None or not lookup.spans or outcome.dropped == 0:
            return
        spawn(self._consider(lookup, outcome, target, tokenizer, spawn))

    async def _consider(
        self,
        lookup: Lookup,
        outcome: PlanOutcome,
        target: SummaryTarget,
        tokenizer: Tokenizer,
        spawn: Spawn,
    ) -> None:
        try:
            assert lookup.policy is not None
            cached = {s.key for s in lookup.found}
            items = outcome.report.items
            for span in dropped_spans(lookup.spans, lookup.messages, items, cached):
                if self._admit(lookup.policy, span.key):
                    spawn(self._summarize(lookup, span, target, tokenizer))
        except Exception:
            log.exception("summary scheduling failed")

    def _admit(self, policy: Policy, key: str) -> bool:
        team, cfg = policy.team, policy.summaries
        retry_at = self._failures.get(key, (0, 0.0))[1]
        if key in self._inflight or key in self._cache:
            self.stats["duplicate"] += 1
            return False
        if retry_at > self.clock():
            self.stats["backoff"] += 1
            return False
        if self._pending.get(team, 0) >= cfg.concurrency * QUEUE_PER_SLOT:
            self.stats["busy"] += 1  # it will come up again on a later turn
            return False
        self._inflight.add(key)
        self._pending[team] = self._pending.get(team, 0) + 1
        self.stats["scheduled"] += 1
        return True

    def _gate(self, team: str, concurrency: int) -> asyncio.Semaphore:
        held = self._gates.get(team)
        if held is None or held[0] != concurrency:  # new, or the policy changed
            held = self._gates[team] = (concurrency, asyncio.Semaphore(concurrency))
        return held[1]

    async def _summarize(
        self, lookup: Lookup, span: Span, target: SummaryTarget, tokenizer: Tokenizer
    ) -> None:
        assert lookup.policy is not None
        team = lookup.policy.team
        try:
            async with self._gate(team, lookup.policy.summaries.concurrency):
                await self._make(lookup, span, target, tokenizer)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._failed(span.key)
            self.stats["failed"] += 1
            log.warning(
                "summary %s for team %s failed (%s); retried later",
                span.key[:12],
                team,
                exc if isinstance(exc, SummaryFailed) else type(exc).__name__,
            )
        finally:
            self._inflight.discard(span.key)
            self._pending[team] = max(0, self._pending.get(team, 1) - 1)

    async def _make(
        self, lookup: Lookup, span: Span, target: SummaryTarget, tokenizer: Tokenizer
    ) -> None:
        policy = lookup.policy
        assert policy is not None
        cfg, key = policy.summaries, span.key
        prompt = prompt_messages(lookup.messages[span.start : span.end], cfg.max_tokens)
        prompt_tokens = sum(tokenizer.count_message(m) for m in prompt) + 3
        estimate = prompt_tokens + cfg.max_tokens
        quota = self.quotas.status(policy.team, policy.quotas, policy.thresholds)
        if policy.quotas.hard_limit and quota.exceeded:
            self.stats["quota"] += 1
            return
        if not self.spend.reserve(policy.team, cfg.daily_token_cap, estimate):
            self.stats["capped"] += 1
            return
        spent = 0
        try:
            store = await self._store(cfg.store)
            if not await store.try_lock(key, target.timeouts.total_s + LOCK_MARGIN_S):
                self.stats["locked"] += 1  # another replica is making it
                return
            try:
                made = (await store.get_many([key])).get(key)  # made elsewhere meanwhile?
                if made is None:
                    prices = self._prices(lookup.model) if self._prices else None
                    call = SummaryCall(policy, lookup.model, prompt, prompt_tokens, prices)
                    try:
                        made, spent = await call_summary(
                            self.upstream, self.usage, self.quotas, call, target, tokenizer
                        )
                    except SummaryFailed as exc:
                        spent = exc.tokens
                        raise
                    await store.put(key, made)
                    self.stats["made"] += 1
                self._remember(key, made)
                self._failures.pop(key, None)
            finally:
                await store.unlock(key)
        finally:
            self.spend.settle(policy.team, estimate, spent)

    def _remember(self, key: str, text: str) -> None:
        self._cache[key] = text
        self._cache.move_to_end(key)
        self._absent.pop(key, None)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def _failed(self, key: str) -> None:
        count = self._failures.get(key, (0, 0.0))[0] + 1
        delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (count - 1))
        # Full jitter on the upper half: failures of many keys at once do not retry in step.
        self._failures[key] = (count, self.clock() + delay * self._rng.uniform(0.5, 1.0))
        self._failures.move_to_end(key)
        while len(self._failures) > FAILURE_MEMORY:
            self._failures.popitem(last=False)

    async def _store(self, url: str | None) -> SummaryStore:
        name = url or DEFAULT_URL
        store = self._stores.get(name)
        if store is not None:
            return store
        async with self._opening:
            store = self._stores.get(name)
            if store is None:
                if self._store_down.get(name, 0.0) > self.clock():
                    raise StoreUnavailable(name)
                try:
                    store = await self._open(url)
                except Exception:
                    self._store_down[name] = self.clock() + STORE_RETRY_S
                    raise
                self._stores[name] = store
        return store

    async def aclose(self) -> None:
        stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            try:
                await store.aclose()
            except Exception:
                log.exception("closing a summary store failed")


class StoreUnavailable(Exception):
    """The store failed to open a moment ago; not tried again yet."""
