"""One planning run: the request and what planning it needs, then the request read and counted.

Every stage reads these two records instead of a dozen values handed from call to call:
`Run` is fixed when planning starts (the body, the team's policy, the model's tokenizer and
window, the budget they give: the contract's floor(ratio * window), less the answer's
reserve); `Counted` is the request once read into items and counted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from proxy.planner.parts.items import Layout
from proxy.planner.parts.memo import Kept, PlanMemo
from proxy.planner.parts.summaries import ExtraSummary, Offered
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
    # How many leading messages are the setup, when this request was cut from another
    # (cache mode plans what it kept): the setup is that request's. None: found here.
    setup: int | None = None
    # Whether a conversation's plan may recall what its omitted turns hold for the current
    # question (budget/turn_recall.py): not in a plan of an earlier part of it (cache mode).
    recall: bool = True
    # The worker's plans of conversations as of their step boundaries (memo.py).
    memo: PlanMemo | None = None
    # Tokens the caller adds to a request it trims (the recall tool's declaration): a plan
    # over the budget fits in that much less; `held` says how much was so held back. A
    # callable is asked only then (most requests fit: what it counts is not needed).
    reserve: int | Callable[[], int] = 0
    held: int = 0

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


def start_run(
    body: Body,
    policy: Policy,
    tokenizer: Tokenizer,
    window: int | None,
    kept: Kept | None,
    offered: Offered,
) -> Run:
    """The run of `body` under `policy`: its budget, what the caller keeps between requests
    and offers beside the body, and a term index when relevance is on and the caller keeps
    none. (Made whole here: a `replace` per request costs more than planning a small
    request does.)"""
    terms = kept.terms if kept is not None else None
    if policy.history.relevance == "bm25" and terms is None:
        terms = TermIndex()
    ratio, for_answer = policy.budget.ratio, policy.budget.reserve_output
    budget = compute_budget(window, ratio, for_answer, max_output(body))
    memo = kept.plans if kept is not None else None
    return Run(
        body, policy, tokenizer, window, budget, terms, offered.summaries,
        memo=memo, reserve=offered.reserve,
    )  # fmt: skip


def max_output(body: Body) -> int | None:
    """The answer's token limit the request sets, if any."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def compute_budget(
    window: int | None, ratio: float, reserve_output: bool, max_output: int | None
) -> int | None:
    """The contract: floor(ratio * window), never more than window - max_output - 16."""
    if window is None:
        return None
    budget = math.floor(ratio * window)
    if reserve_output and max_output is not None:
        budget = min(budget, window - max_output - 16)
    return max(budget, 0)
