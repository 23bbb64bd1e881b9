"""One planning run: the request and what planning it needs, then the request read and counted.

Every stage reads these two records instead of a dozen values handed from call to call:
`Run` is fixed when planning starts (the body, the team's policy, the model's tokenizer and
window, the budget they give); `Counted` is the request once read into items and counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxy.planner.parts.items import Layout
from proxy.planner.parts.summaries import ExtraSummary
from proxy.policy import Policy
from proxy.relevance import TermIndex
from proxy.types import Body, Tokenizer


@dataclass(frozen=True, slots=True)
class Run:
    body: Body
    policy: Policy
    tokenizer: Tokenizer
    window: int | None  # the model's context window; None: unknown, forwarded untrimmed
    budget: int | None  # what the prompt may take (None with no window)
    terms: TermIndex | None  # the history's words, kept between requests (relevance)
    summaries: Sequence[ExtraSummary] = ()  # proxy-made summaries on offer

    @property
    def names(self) -> tuple[str, bool]:
        """The tokenizer's name, and whether its counts are estimates."""
        return self.tokenizer.name, self.tokenizer.estimated


@dataclass(slots=True)
class Counted:
    layout: Layout  # the request's messages read into tagged items, each with its cost
    full: list[int]  # each message's tokens as forwarded untrimmed
    fixed: int  # the request's tokens besides its messages (priming, tool schemas)
    before: int  # the whole request's tokens as it came (tags removed)
