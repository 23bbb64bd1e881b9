"""Summaries: stable spans and keys, what gets scheduled, the cache, backoff, cap, concurrency."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType, SimpleNamespace
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.planner.request import SUMMARY_PREFIX, Offered, plan_request
from proxy.policy.model import HistoryPolicy, ModelPolicy, Policy, SummaryPolicy, UpstreamPolicy
from proxy.summaries.calls import SpendBook, parse_answer
from proxy.summaries.spans import (
    MAX_MESSAGE_CHARS,
    chunk_spans,
    dropped_spans,
    prompt_messages,
    settings_tag,
    transcript,
)
from proxy.summaries.summarizer import Summarizer, SummaryTarget
from proxy.tokens import ContextWindows, request_cost
from proxy.upstream.client import Timeouts
from proxy.usage.ledger import UsageLog, UsageRecord
from proxy.usage.quotas import QuotaBook
from tests.planner_fakes import WordTokenizer

TAG = settings_tag("team-a", "http://up.example/v1", "gpt-4o", 512)


def convo(turns: int, words: int = 3, system: bool = True) -> list[dict[str, Any]]:
    """A system message, `turns` question/answer pairs, and the current question."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "Be helpful."}] if system else []
    for t in range(turns):
        filler = " ".join(f"w{t}x{i}" for i in range(words))
        out.append({"role": "user", "content": f"question {t} {filler}"})
        out.append({"role": "assistant", "content": f"answer {t} {filler}"})
    out.append({"role": "user", "content": "the current question"})
    return out


def next_turn(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        *messages,
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": "more"},
    ]


# -- spans and keys -----------------------------------------------------------------------------


def test_spans_are_whole_turns_in_fixed_chunks() -> None:
    messages = convo(10)  # system, 10 turns at 1..20, the current question at 21
    spans = chunk_spans(messages, 4, TAG)
    assert [(s.start, s.end) for s in spans] == [(1, 9), (9, 17)]  # turns 8-9: not a full chunk
    assert all(messages[s.start]["role"] == "user" for s in spans)
    assert chunk_spans(messages, 5, TAG)[-1].end == 21  # the last chunk ends at the current turn
    assert chunk_spans(convo(3), 4, TAG) == []
    assert chunk_spans([], 4, TAG) == []


def test_next_turn_hits_the_same_keys() -> None:
    messages = convo(9)
    first = chunk_spans(messages, 4, TAG)
    later = chunk_spans(next_turn(messages), 4, TAG)
    assert later[: len(first)] == first


def test_first_chunk_takes_what_precedes_the_first_question() -> None:
    messages = convo(4)
    messages.insert(1, {"role": "assistant", "content": "Hi, how can I help?"})
    (span,) = chunk_spans(messages, 4, TAG)
    assert (span.start, span.end) == (1, 10)


def test_key_depends_on_content_and_summarizer_settings() -> None:
    messages = convo(4)
    key = chunk_spans(messages, 4, TAG)[0].key
    assert chunk_spans(convo(4), 4, TAG)[0].key == key
    up = "http://up.example/v1"
    assert chunk_spans(messages, 4, settings_tag("team-a", up, "gpt-4o-mini", 512))[0].key != key
    assert chunk_spans(messages, 4, settings_tag("team-a", up, "gpt-4o", 256))[0].key != key
    # Whose it is: another team, or the same team through another upstream, never shares it.
    assert chunk_spans(messages, 4, settings_tag("team-b", up, "gpt-4o", 512))[0].key != key
    assert (
        chunk_spans(messages, 4, settings_tag("team-a", "http://x/v1", "gpt-4o", 512))[0].key != key
    )
    # Fields are length-prefixed: moving a character from one to the next changes the key.
    assert settings_tag("ab", "c", "m", 1) != settings_tag("a", "bc", "m", 1)
    changed = [dict(m) for m in messages]
    changed[3] = {**changed[3], "content": changed[3]["content"] + "!"}
    assert chunk_spans(changed, 4, TAG)[0].key != key
    with_call = [dict(m) for m in messages]
    with_call[2] = {**with_call[2], "tool_calls": [{"id": "c", "function": {"name": "f"}}]}
    with_call.insert(3, {"role": "tool", "tool_call_id": "c", "content": "r"})
    assert chunk_spans(with_call, 4, TAG)[0].key != key


def test_a_span_never_splits_a_tool_group() -> None:
    messages = convo(8)
    # An assistant call in turn 3 whose result comes after the user message that starts turn 4.
    messages[8] = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "t1", "function": {"name": "f", "arguments": "{}"}}],
    }
    messages.insert(10, {"role": "tool", "tool_call_id": "t1", "content": "result"})
    assert chunk_spans(messages, 4, TAG) == []  # both chunks would cut the group
    spans = chunk_spans(messages, 2, TAG)  # turns 2-3 and 4-5 would; 0-1 and 6-7 do not
    assert [(s.start, s.end) for s in spans] == [(1, 5), (14, 18)]


@settings(max_examples=60, deadline=None)
@given(
    roles=st.lists(st.sampled_from(["user", "assistant", "system"]), min_size=1, max_size=40),
    chunk=st.integers(1, 5),
    extra=st.integers(0, 6),
)
def test_span_invariants(roles: list[str], chunk: int, extra: int) -> None:
    messages = [{"role": r, "content": f"m{i}"} for i, r in enumerate(roles)]
    messages.append({"role": "user", "content": "now"})
    spans = chunk_spans(messages, chunk, TAG)
    last = 0
    for s in spans:
        assert last <= s.start < s.end
        last = s.end
        users = sum(m["role"] == "user" for m in messages[s.start : s.end])
        assert users == chunk
    current = max(i for i, m in enumerate(messages) if m["role"] == "user")
    assert last <= current
    longer = list(messages)
    for i in range(extra):
        longer += [{"role": "assistant", "content": f"a{i}"}, {"role": "user", "content": f"u{i}"}]
    assert chunk_spans(longer, chunk, TAG)[: len(spans)] == spans


# -- what is scheduled --------------------------------------------------------------------------


def items(actions: dict[int, str]) -> list[Any]:
    return [SimpleNamespace(message=i, kind="message", action=a) for i, a in actions.items()]


def test_dropped_spans_only_mostly_dropped_and_uncovered() -> None:
    messages = convo(8)
    spans = chunk_spans(messages, 4, TAG)  # (1, 9) and (9, 17)
    all_dropped = {i: "drop" for i in range(1, 17)}
    assert dropped_spans(spans, messages, items(all_dropped), set()) == spans
    assert dropped_spans(spans, messages, items(all_dropped), {spans[0].key}) == [spans[1]]
    half = {**all_dropped, **{i: "keep" for i in range(1, 5)}}  # 4 of 8: not "mostly"
    assert dropped_spans(spans, messages, items(half), set()) == [spans[1]]
    most = {**all_dropped, **{i: "keep" for i in range(1, 4)}}  # 5 of 8 dropped
    assert dropped_spans(spans, messages, items(most), set()) == spans
    client = {**all_dropped, 12: "summarize"}  # a client summary stands in for part of it
    assert dropped_spans(spans, messages, items(client), set()) == [spans[0]]
    assert dropped_spans(spans, messages, items({}), set()) == []


# -- prompt -------------------------------------------------------------------------------------


def test_prompt_keeps_facts_within_max_tokens() -> None:
    span = [
        {"role": "system", "content": "SECRET SYSTEM"},
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "1", "function": {"name": "search", "arguments": '{"q": "x"}'}}],
        },
        {"role": "tool", "tool_call_id": "1", "content": "y" * (MAX_MESSAGE_CHARS * 2)},
    ]
    system, user = prompt_messages(span, 300)
    for word in ("fact", "name", "date", "decision", "open question", "300 tokens"):
        assert word in system["content"]
    text = user["content"]
    assert "SECRET SYSTEM" not in text  # system messages are never dropped: not summarized
    assert "user: look\n[image_url]" in text
    assert 'search({"q": "x"})' in text
    assert len(text) < MAX_MESSAGE_CHARS + 200 and text.endswith("[…]")
    assert transcript([]) == ""


def test_parse_answer() -> None:
    answer = {
        "choices": [{"message": {"content": " sum "}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2},
    }
    assert parse_answer(orjson.dumps(answer)) == ("sum", (5, 2))
    assert parse_answer(b"nope") == ("", None)
    assert parse_answer(b'{"choices": []}') == ("", None)


# -- the daily cap ------------------------------------------------------------------------------


def test_spend_book_never_exceeds_the_cap() -> None:
    day = ["2026-01-01"]
    book = SpendBook(lambda: day[0])
    assert book.reserve("t", 100, 60)
    assert not book.reserve("t", 100, 60)  # in flight counts: 60 + 60 > 100
    book.settle("t", 60, 30)
    assert book.spent("t") == 30
    assert book.reserve("t", 100, 70)
    assert not book.reserve("t", 100, 1)
    assert book.reserve("other", 100, 100)
    assert book.reserve("t", None, 10**9)  # no cap
    day[0] = "2026-01-02"
    book.settle("t", 70 + 10**9, 0)
    assert book.spent("t") == 0 and book.reserve("t", 100, 100)


# -- the summarizer, in process -----------------------------------------------------------------


class MemoryStore:
    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.reads: list[list[str]] = []
        self.locks: set[str] = set()

    async def get_many(self, keys: Sequence[str]) -> dict[str, str]:
        self.reads.append(list(keys))
        return {k: self.data[k] for k in keys if k in self.data}

    async def put(self, key: str, text: str) -> None:
        self.data[key] = text

    async def try_lock(self, key: str, ttl_s: float) -> bool:
        if key in self.locks:
            return False
        self.locks.add(key)
        return True

    async def unlock(self, key: str) -> None:
        self.locks.discard(key)

    async def aclose(self) -> None:
        pass


@dataclass
class Answer:
    status: int
    body: bytes

    async def read(self) -> bytes:
        return self.body


class StubUpstream:
    """Answers summary calls with `status`; holds them while `gate` is clear."""

    def __init__(self) -> None:
        self.status = 200
        self.calls: list[dict[str, Any]] = []
        self.headers: list[list[tuple[str, str]]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.active = self.peak = 0

    async def send(
        self, method: str, url: str, headers: Any, body: bytes, timeouts: Any, streaming: bool
    ) -> Answer:
        self.calls.append(orjson.loads(body))
        self.headers.append(headers)
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await self.gate.wait()
        finally:
            self.active -= 1
        if self.status != 200:
            return Answer(self.status, b'{"error": {}}')
        answer = {
            "choices": [{"message": {"content": f"summary {len(self.calls)}"}}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 10},
        }
        return Answer(200, orjson.dumps(answer))


class Rig:
    def __init__(self, prices: Any = None, **summaries: Any) -> None:
        self.store = MemoryStore()
        self.upstream = StubUpstream()
        self.rows: list[UsageRecord] = []
        usage = UsageLog("-")
        usage.write = self.rows.append  # type: ignore[method-assign]
        self.quotas = QuotaBook()

        async def opener(url: str | None) -> MemoryStore:
            return self.store

        self.now = 1000.0
        self.summarizer = Summarizer(
            self.upstream,
            usage,
            self.quotas,
            store_opener=opener,
            clock=lambda: self.now,
            prices=prices,
        )  # type: ignore[arg-type]
        cfg = {"enabled": True, "chunk_turns": 2, "max_tokens": 64, **summaries}
        self.policy = Policy(
            team="t",
            models=MappingProxyType({"gpt-4o": ModelPolicy(context_window=180)}),
            history=HistoryPolicy(keep_recent=1, relevance="off"),
            summaries=SummaryPolicy(**cfg),
        )
        self.tasks: list[asyncio.Task[None]] = []
        self.target = SummaryTarget(
            "http://up/v1/chat/completions", [("authorization", "Bearer sk-x")], Timeouts(30, 5)
        )

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self.tasks.append(asyncio.ensure_future(coro))

    async def turn(self, messages: list[dict[str, Any]]) -> Any:
        """One request: lookup, plan, schedule; returns the plan outcome."""
        body = {"model": "gpt-4o", "messages": messages}
        tok = WordTokenizer()
        found = await self.summarizer.lookup(self.policy, body)
        outcome = plan_request(body, self.policy, tok, 180, offered=Offered(found.found))
        self.summarizer.schedule(found, outcome, self.target, tok, self.spawn)
        return outcome

    async def settle(self) -> None:
        while any(not t.done() for t in self.tasks):
            await asyncio.gather(*self.tasks)


async def test_summaries_made_once_then_substituted() -> None:
    rig = Rig()
    messages = convo(12, words=6)
    first = await rig.turn(messages)
    assert first.dropped > 0 and first.summarized == 0
    await rig.settle()
    made = len(rig.upstream.calls)
    assert made >= 2 and len(rig.store.data) == made
    call = rig.upstream.calls[0]
    assert call["max_tokens"] == 64 and call["model"] == "gpt-4o"
    assert rig.upstream.headers[0] == [("authorization", "Bearer sk-x")]
    assert [r.kind for r in rig.rows] == ["summary"] * made
    assert all(r.total_tokens == 50 and r.usage_source == "upstream" for r in rig.rows)
    assert rig.quotas.used("t")[0] == 50 * made
    second = await rig.turn(next_turn(messages))
    assert second.summarized > 0
    forwarded = second.body["messages"]
    assert any(m["role"] == "system" and m["content"].startswith(SUMMARY_PREFIX) for m in forwarded)
    await rig.settle()
    # The longer conversation may drop one more span; none is summarized twice.
    prompts = [c["messages"][1]["content"] for c in rig.upstream.calls]
    assert len(set(prompts)) == len(prompts) == len(rig.store.data)


async def test_a_summary_is_served_only_to_the_team_and_upstream_that_made_it() -> None:
    """Another team sending the same turns (through the same store), or the same team
    through another upstream, finds none of it: no summary planted by a team's own
    upstream reaches anyone else, and the store says nothing of what another team sent."""
    rig = Rig()
    messages = convo(12, words=6)
    await rig.turn(messages)
    await rig.settle()
    assert rig.store.data
    again = await rig.summarizer.lookup(rig.policy, {"model": "gpt-4o", "messages": messages})
    assert again.found  # the team that made them finds them
    other_team = replace(rig.policy, team="u")
    other_upstream = replace(rig.policy, upstream=UpstreamPolicy(base_url="http://mine/v1"))
    for policy in (other_team, other_upstream):
        found = await rig.summarizer.lookup(policy, {"model": "gpt-4o", "messages": messages})
        assert found.spans and not found.found


async def test_lookup_reads_the_store_once_then_memory() -> None:
    rig = Rig()
    messages = convo(12, words=6)
    owner = rig.policy.team, rig.policy.upstream.base_url or ""
    spans = chunk_spans(messages, 2, settings_tag(*owner, "gpt-4o", 64))
    rig.store.data[spans[0].key] = "stored earlier"
    body = {"model": "gpt-4o", "messages": messages}
    found = await rig.summarizer.lookup(rig.policy, body)
    assert [f.text for f in found.found] == ["stored earlier"]
    assert rig.store.reads == [[s.key for s in spans]]  # one get_many for every candidate
    await rig.summarizer.lookup(rig.policy, body)
    assert len(rig.store.reads) == 1  # a hit from memory, a miss remembered for a while
    rig.now += 31
    await rig.summarizer.lookup(rig.policy, body)
    assert rig.store.reads[-1] == [s.key for s in spans[1:]]
    off = Policy(summaries=SummaryPolicy(enabled=False))
    assert (await rig.summarizer.lookup(off, body)).spans == []


async def test_failure_backs_off_then_retries() -> None:
    rig = Rig()
    rig.upstream.status = 500
    messages = convo(12, words=6)
    await rig.turn(messages)
    await rig.settle()
    failed = len(rig.upstream.calls)
    assert failed >= 1 and not rig.store.data and not rig.store.locks
    assert all(
        r.kind == "summary" and r.status == 500 and r.error == "upstream_500" for r in rig.rows
    )
    await rig.turn(messages)
    await rig.settle()
    assert len(rig.upstream.calls) == failed and rig.summarizer.stats["backoff"] == failed
    rig.upstream.status = 200
    rig.now += 15.0  # under the first backoff's least delay (half of 30 s)
    await rig.turn(messages)
    await rig.settle()
    assert len(rig.upstream.calls) == failed
    rig.now += 30.0
    await rig.turn(messages)
    await rig.settle()
    assert len(rig.upstream.calls) == 2 * failed and len(rig.store.data) == failed


async def test_concurrency_bound() -> None:
    rig = Rig(concurrency=2)
    rig.upstream.gate.clear()
    await rig.turn(convo(16, words=6))
    while rig.upstream.active < 2 or len(rig.tasks) < 4:
        await asyncio.sleep(0)
    for _ in range(20):
        await asyncio.sleep(0)
    assert rig.upstream.active == 2  # the others wait for a slot
    rig.upstream.gate.set()
    await rig.settle()
    assert rig.upstream.peak == 2 and len(rig.upstream.calls) >= 4


async def test_daily_cap_is_never_exceeded() -> None:
    rig = Rig(daily_token_cap=250)  # a call reserves its prompt + max_tokens (about 170)
    await rig.turn(convo(16, words=6))
    await rig.settle()
    spent = sum(r.total_tokens for r in rig.rows)
    assert 0 < spent <= 250
    assert rig.summarizer.stats["capped"] >= 1  # some spans were left for another day
    assert rig.summarizer.spend.spent("t") == spent
    tiny = Rig(daily_token_cap=1)
    await tiny.turn(convo(16, words=6))
    await tiny.settle()
    assert tiny.upstream.calls == [] and tiny.summarizer.stats["capped"] >= 1


async def test_errors_of_the_store_are_contained() -> None:
    rig = Rig()

    async def broken(url: str | None) -> MemoryStore:
        raise OSError("disk gone")

    rig.summarizer._open = broken  # type: ignore[assignment]
    messages = convo(12, words=6)
    outcome = await rig.turn(messages)  # no exception reaches the request
    assert outcome.dropped > 0
    await rig.settle()
    assert rig.upstream.calls == [] and rig.summarizer.stats["failed"] >= 1


def test_reasoning_models_get_max_completion_tokens() -> None:
    from proxy.summaries.calls import limit_field

    assert limit_field("gpt-4o") == "max_tokens"
    assert limit_field("gpt-4.1-mini") == "max_tokens"
    assert limit_field("o3-mini") == "max_completion_tokens"
    assert limit_field("openai/gpt-5") == "max_completion_tokens"
    assert limit_field("azure/o4-mini-2025-04-16") == "max_completion_tokens"


async def test_summary_rows_carry_their_cost_from_the_price_map() -> None:
    """The proxy's own summary calls are priced like client requests (cost_usd)."""
    windows = ContextWindows()
    prices = windows.prices("gpt-4o")
    assert prices is not None and prices.input > 0
    rig = Rig(prices=windows.prices)
    await rig.turn(convo(12, words=6))
    await rig.settle()
    assert rig.rows and all(r.kind == "summary" for r in rig.rows)
    for r in rig.rows:
        assert r.cost_usd == request_cost(prices, r.prompt_tokens, None, r.completion_tokens)
        assert r.cost_usd is not None and r.cost_usd > 0
    unpriced = Rig()
    await unpriced.turn(convo(12, words=6))
    await unpriced.settle()
    assert unpriced.rows and all(r.cost_usd is None for r in unpriced.rows)
