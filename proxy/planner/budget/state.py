"""The allocator's state: the items' costs and texts as dedupe and clearing leave them, and
the policy's rules per section; what making choices, clearing and deciding read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxy.planner.budget.placeholders import (
    Mask,
    longest_reply_placeholder,
    longest_turns_placeholder,
)
from proxy.planner.parts import (
    LONGEST_MARKER,
    Action,
    Decision,
    Layout,
    Turn,
    history_turns,
    section_policy,
)
from proxy.policy import Policy, SectionPolicy
from proxy.relevance import TermIndex
from proxy.types import Overflow, Section, Strategy, Tokenizer

OPENING = "required (answers the setup)"


def masked(keys: Sequence[int], mask: Mask, why: str) -> dict[int, Decision]:
    """A reply of items `keys` as its placeholder: on `mask.key`, the others dropped."""
    out = {k: Decision(Action.DROP, f"{why}: reply omitted") for k in keys}
    out[mask.key] = Decision(Action.CLEAR, f"{why}: reply omitted", mask.text, mask.tokens)
    return out


@dataclass(frozen=True, slots=True)
class Opening:
    """The opening's reply (what answered the setup's question), a choice whose
    placeholder is required: shown whenever the reply is not kept whole."""

    keys: tuple[int, ...]
    mask: Mask

    def decisions(self) -> dict[int, Decision]:
        return masked(self.keys, self.mask, OPENING)


class PlanState:
    """One request's items as the allocator sees them (shared by its re-plans)."""

    __slots__ = (
        "_placeholders", "_turns", "cleared", "cost", "layout", "marker", "modes",
        "older_merits", "opening", "policy", "preset", "ranks", "ratios",
        "sections", "terms", "text", "tokenizer",
    )  # fmt: skip

    def __init__(
        self, layout: Layout, policy: Policy, tokenizer: Tokenizer, terms: TermIndex | None
    ) -> None:
        self.layout = layout
        self.terms = terms if terms is not None else TermIndex()  # shared by re-plans
        self.policy = policy
        self.tokenizer = tokenizer
        self.marker = tokenizer.count_text(LONGEST_MARKER)
        self.cost = layout.cost.copy()  # costs after dedupe's rewrites and clearing
        self.text: dict[int, str] = {}  # texts rewritten (summary lines removed, cleared)
        self.cleared: dict[int, Decision] = {}  # old tool results cleared for the last plan
        # Required items cut before planning (a setup over half the budget): their decisions.
        self.preset: dict[int, Decision] = {}
        # The older history's merits (history.merits) and positions, by its choices:
        # clearing changes costs, not what is ranked, so the choices made again reuse them.
        self.older_merits: tuple[tuple[int, ...], list[float], list[int]] | None = None
        self._turns: list[Turn] | None = None
        self.opening: Opening | None = None  # pinned.py
        self._placeholders: tuple[int, int] | None = None
        self.sections: dict[Section, SectionPolicy] = {
            s: section_policy(policy, s) for s in Section
        }
        # Per section: score order, truncatable, recency (a run of the newest); its ratio
        # and its default priority's rank.
        self.modes: dict[Section, tuple[bool, bool, bool]] = {}
        self.ratios: dict[Section, float] = {}
        self.ranks: dict[Section, int] = {}
        score, recent, truncate = Strategy.SCORE, Strategy.RECENT, Overflow.TRUNCATE
        for s, p in self.sections.items():
            self.modes[s] = (p.strategy is score, p.overflow is truncate, p.strategy is recent)
            self.ratios[s], self.ranks[s] = p.ratio, p.priority.rank

    def text_of(self, key: int) -> str:
        return self.text.get(key, self.layout.text[key])

    @property
    def placeholder_tokens(self) -> tuple[int, int]:
        """What a reply's placeholder and an omitted-turns marker cost at most, each as a
        message of its own."""
        if self._placeholders is None:
            count = self.tokenizer.count_message
            reply = count({"role": "assistant", "content": longest_reply_placeholder()})
            turns = count({"role": "user", "content": longest_turns_placeholder()})
            self._placeholders = reply, turns
        return self._placeholders

    @property
    def turns(self) -> list[Turn]:
        """The history's turns (parts/turns.py), read when first asked for."""
        if self._turns is None:
            self._turns = history_turns(self.layout)
        return self._turns
