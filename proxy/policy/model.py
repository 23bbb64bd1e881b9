"""Policies: the per-team settings, and the key -> team -> policy lookup."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from proxy.types import Overflow, Priority, Section, Strategy


@dataclass(frozen=True, slots=True)
class AnthropicUpstreamPolicy:
    """Where Anthropic's Messages API goes (default https://api.anthropic.com) and the
    environment variable holding the team's Anthropic key."""

    base_url: str | None = None
    api_key_env: str | None = None


@dataclass(frozen=True, slots=True)
class UpstreamPolicy:
    base_url: str | None = None
    api_key_env: str | None = None
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    retries: int = 0
    anthropic: AnthropicUpstreamPolicy = AnthropicUpstreamPolicy()


@dataclass(frozen=True, slots=True)
class BudgetPolicy:
    ratio: float = 0.8
    reserve_output: bool = True
    on_required_overflow: str = "reject"  # or "truncate"


@dataclass(frozen=True, slots=True)
class ModelPolicy:
    context_window: int | None = None
    tokenizer: str | None = None  # path to a tokenizer.json, resolved against the policy file
    # The model's price, for a name the bundled price map does not know (or to override
    # it): USD per million tokens; cached input at the input price unless given.
    input_usd_per_mtok: float | None = None
    output_usd_per_mtok: float | None = None
    cached_usd_per_mtok: float | None = None


@dataclass(frozen=True, slots=True)
class SectionPolicy:
    ratio: float
    priority: Priority
    overflow: Overflow
    strategy: Strategy


@dataclass(frozen=True, slots=True)
class HistoryPolicy:
    # The newest turns kept with their replies' text before older ones (within half the
    # room the required parts leave). Measured (bench_quality.py, evidence recall), 3 / 4 / 6:
    # tau-airline at 3,500 0.663 / 0.649 / 0.631, LoCoMo at 4k 0.799 / - / 0.789: a turn
    # pinned whole costs the room relevance would give the turns a question looks back to.
    keep_recent: int = 3
    relevance: str = "bm25"  # or "off"
    neighbors: int = 0


@dataclass(frozen=True, slots=True)
class ToolsPolicy:
    """Agent tool exchanges: how many newest stay whole, and how older results are cleared."""

    keep_recent: int = 3  # newest tool exchanges after the last user message: required
    clear: bool = True  # replace old results by a placeholder before dropping exchanges
    # A result smaller than this is not worth clearing: its placeholder saves little.
    clear_min_tokens: int = 100
    exclude: tuple[str, ...] = ()  # tools whose results are never cleared


@dataclass(frozen=True, slots=True)
class ThresholdPolicy:
    warning: float = 0.80
    critical: float = 0.90


MICRO = 1_000_000  # dollars are counted in millionths


@dataclass(frozen=True, slots=True)
class QuotaPolicy:
    daily_tokens: int | None = None
    monthly_tokens: int | None = None
    hard_limit: bool = False
    daily_usd: float | None = None  # spend, at the bundled prices (cached tokens at theirs)
    monthly_usd: float | None = None
    # What a request that sets no answer limit (max_tokens...) holds against a hard quota
    # for its answer until it is booked.
    answer_hold_tokens: int = 4096

    def in_micro_usd(self) -> QuotaPolicy:
        """The dollar quotas as a token-shaped policy in millionths of a dollar (what the
        spend book counts), with the same hard limit."""

        def micro(usd: float | None) -> int | None:
            return None if usd is None else max(1, round(usd * MICRO))

        return QuotaPolicy(
            micro(self.daily_usd), micro(self.monthly_usd), self.hard_limit,
            answer_hold_tokens=self.answer_hold_tokens,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class RateLimitPolicy:
    """Requests and tokens per minute (usage/rate_limits.py): the team's, across all its
    keys, and each key's on its own (`key_*`); None: no limit. Tokens count as a hard
    quota holds them: the prompt as planned and the answer limit, settled when booked."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    key_requests_per_minute: int | None = None
    key_tokens_per_minute: int | None = None


@dataclass(frozen=True, slots=True)
class VisibilityPolicy:
    prompt_report: bool = False


@dataclass(frozen=True, slots=True)
class TagsPolicy:
    """Where inline `<context>` tags are read: always in system and developer messages (the
    operator's), in user messages only when this says so (and then never past what a user's
    text may claim), never in assistant messages or tool results."""

    inline_in_user: bool = False


@dataclass(frozen=True, slots=True)
class SummaryPolicy:
    enabled: bool = False
    model: str | None = None
    max_tokens: int = 512
    store: str | None = None
    concurrency: int = 2
    daily_token_cap: int | None = None
    chunk_turns: int = 8


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """Cache-stable cuts: over budget, a request is planned as it stood at its last step
    boundary (steps of (1 - watermark) of the budget counted from its start), so the
    forwarded prefix stays the same (and the provider's prompt cache hits) until the next
    step."""

    enabled: bool = True
    # A step is (1 - watermark) * budget tokens of history. Measured on LoCoMo at 4k
    # (bench_cache.py, all 1,536 questions, with the recall below): 0.3-0.6 about alike.
    watermark: float = 0.4
    # A conversation in cache mode (planner/cache/chat.py) is planned as of its last step
    # boundary (the first turn at or after k steps of its history), at watermark of the
    # budget, the turns since appended whole; what the current question needs that this
    # plan left out is recalled in one quoted message just before it: the lines whose
    # relevance stands out (history/standout.py) at least recall_floor standard deviations
    # above the bulk of the history's (counted at 0.3 for a turn that asks nothing, and
    # less the more it matches the message just before it), in at most recall_share of
    # the budget (the turns since the boundary but the newest history.keep_recent give
    # their room to a larger one). Measured (bench_quality.py, cached-chats: evidence
    # recall, the share of trimmed prompt tokens the provider caches; per request:
    # LoCoMo 4k 0.781, RealMem 16k 0.740): floor 2 LoCoMo 0.799, 84%, RealMem 0.549, 67%;
    # floor 1 LoCoMo 0.794, 73%, RealMem 0.618, 55%. On long assistant chats no floor
    # keeps both the distant past and a cached prefix: hence `chats` off by default (a
    # client's own cache signals turn it on: an OpenAI prompt_cache_key, Anthropic
    # cache_control points).
    recall_share: float = 1.0
    recall_floor: float = 2.0
    # Conversations (requests that are not agent loops) cut in steps too, with the recall
    # above; off: a conversation is planned per request (the most recall on long chats,
    # little cached), unless its client sends cache signals.
    chats: bool = False
    # An agent loop (tool results the bulk of the request) is planned as of its last step
    # boundary, at agent_watermark of the budget, with the steps since appended whole and
    # the old results its newest commands name recalled in one message at the end, in at
    # most agent_recall_share of the budget (planner/cache/agent.py). Measured
    # (bench_quality.py, evidence recall / cached share of trimmed prompt tokens), watermark
    # 0.7 with recall share 0.08 -> 0.3: agent runs at 16k 0.863 / 78% -> 0.917 / 70%, text
    # agents 0.916 / 79% -> 0.945 / 70%, tau-airline at 3,500 0.665 -> 0.696, Claude Code
    # sessions at 32k 0.569 -> 0.723 (a file read is 2-10k tokens: 0.08 held almost none);
    # 0.2: Claude Code 0.672. A higher watermark lost recall (0.8: Claude Code 0.518).
    agent_watermark: float = 0.7
    agent_recall_share: float = 0.3


@dataclass(frozen=True, slots=True)
class RecallPolicy:
    """The proxy's own tool, `context_recall`, declared in a request it trimmed so that the
    model can fetch back what was left out (served from the request in flight)."""

    # auto: when the request declares tools or litellm's map says the model takes them;
    # on: whenever a plan left something out; off: never.
    tool: str = "auto"
    max_tokens: int = 4000  # what one call of the tool returns at most
    rounds: int = 2  # continuations of one answer that called only the tool


DEFAULT_SECTIONS: Mapping[Section, SectionPolicy] = MappingProxyType(
    {
        Section.SYSTEM_PROMPT: SectionPolicy(
            0.15, Priority.REQUIRED, Overflow.TRUNCATE, Strategy.RECENT
        ),
        Section.GOAL: SectionPolicy(0.05, Priority.REQUIRED, Overflow.TRUNCATE, Strategy.RECENT),
        Section.MEMORY: SectionPolicy(0.10, Priority.HIGH, Overflow.TRUNCATE, Strategy.RECENT),
        Section.WORKING_STATE: SectionPolicy(
            0.05, Priority.HIGH, Overflow.TRUNCATE, Strategy.RECENT
        ),
        Section.CONVERSATION_SUMMARY: SectionPolicy(
            0.15, Priority.MEDIUM, Overflow.TRUNCATE, Strategy.RECENT
        ),
        Section.RETRIEVED_CONTEXT: SectionPolicy(
            0.10, Priority.MEDIUM, Overflow.DROP, Strategy.SCORE
        ),
        Section.RECENT_MESSAGES: SectionPolicy(0.35, Priority.HIGH, Overflow.DROP, Strategy.RECENT),
        Section.SCAFFOLDING_REMINDER: SectionPolicy(
            0.05, Priority.LOW, Overflow.TRUNCATE, Strategy.RECENT
        ),
    }
)

# Markdown headings in system messages that start a section (matched case-insensitively).
DEFAULT_HEADINGS: Mapping[str, Section] = MappingProxyType(
    {
        "goal": Section.GOAL,
        "memory": Section.MEMORY,
        "working state": Section.WORKING_STATE,
        "conversation summary": Section.CONVERSATION_SUMMARY,
        "summary": Section.CONVERSATION_SUMMARY,
        "retrieved context": Section.RETRIEVED_CONTEXT,
        "reminder": Section.SCAFFOLDING_REMINDER,
        "scaffolding reminder": Section.SCAFFOLDING_REMINDER,
    }
)


# What a team reaches past the planned routes unless its policy says otherwise: listing
# models and making embeddings. Stored completions, responses, files and batches live in
# the provider account that teams sharing an upstream key share: never by default.
DEFAULT_PASSTHROUGH = ("GET /v1/models", "GET /v1/models/*", "POST /v1/embeddings")


@dataclass(frozen=True, slots=True)
class Policy:
    name: str = "default"  # the file stem; shown in x-context-policy
    team: str = "default"
    source: str = "<built-in>"
    keys: tuple[str, ...] = ()
    admin_keys: tuple[str, ...] = ()
    # Who reads /metrics (team names, spend): "admin" (an admin key; in open mode anyone
    # until a policy lists admin keys) or "public" (anyone who reaches the port).
    metrics: str = "admin"
    # The routes other than the planned ones that the team's keys may reach (key mode).
    passthrough: tuple[str, ...] = DEFAULT_PASSTHROUGH
    upstream: UpstreamPolicy = field(default_factory=UpstreamPolicy)
    budget: BudgetPolicy = field(default_factory=BudgetPolicy)
    default_context_window: int | None = None
    models: Mapping[str, ModelPolicy] = field(default_factory=lambda: MappingProxyType({}))
    sections: Mapping[Section, SectionPolicy] = field(default_factory=lambda: DEFAULT_SECTIONS)
    headings: Mapping[str, Section] = field(default_factory=lambda: DEFAULT_HEADINGS)
    history: HistoryPolicy = field(default_factory=HistoryPolicy)
    tools: ToolsPolicy = field(default_factory=ToolsPolicy)
    thresholds: ThresholdPolicy = field(default_factory=ThresholdPolicy)
    quotas: QuotaPolicy = field(default_factory=QuotaPolicy)
    rate_limits: RateLimitPolicy = field(default_factory=RateLimitPolicy)
    visibility: VisibilityPolicy = field(default_factory=VisibilityPolicy)
    tags: TagsPolicy = field(default_factory=TagsPolicy)
    summaries: SummaryPolicy = field(default_factory=SummaryPolicy)
    cache: CachePolicy = field(default_factory=CachePolicy)
    recall: RecallPolicy = field(default_factory=RecallPolicy)


def hash_key(key: str) -> str:
    """The stored form of a proxy key."""
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()
