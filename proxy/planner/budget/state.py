"""The allocator's state: the items' costs and texts as dedupe and clearing leave them, and
the policy's rules per section; what making choices, clearing and deciding read."""

from __future__ import annotations

from proxy.planner.parts import MARKER, Decision, Layout, section_policy
from proxy.policy import Policy, SectionPolicy
from proxy.relevance import TermIndex
from proxy.types import Overflow, Section, Strategy, Tokenizer


class PlanState:
    """One request's items as the allocator sees them (shared by its re-plans)."""

    __slots__ = (
        "cleared", "cost", "layout", "marker", "modes", "older_merits", "policy", "preset",
        "ranks", "ratios", "recent_room", "sections", "terms", "text", "tokenizer",
    )  # fmt: skip

    def __init__(
        self, layout: Layout, policy: Policy, tokenizer: Tokenizer, terms: TermIndex | None
    ) -> None:
        self.layout = layout
        self.terms = terms if terms is not None else TermIndex()  # shared by re-plans
        self.policy = policy
        self.tokenizer = tokenizer
        self.marker = tokenizer.count_text(MARKER)
        self.cost = layout.cost.copy()  # costs after dedupe's rewrites and clearing
        self.text: dict[int, str] = {}  # texts rewritten (summary lines removed, cleared)
        self.cleared: dict[int, Decision] = {}  # old tool results cleared for the last plan
        # Required items cut before planning (a setup over half the budget): their decisions.
        self.preset: dict[int, Decision] = {}
        # The older history's merits (history.merits) and positions, by its choices:
        # clearing changes costs, not what is ranked, so the choices made again reuse them.
        self.older_merits: tuple[tuple[int, ...], list[float], list[int]] | None = None
        # Tokens the newest turns hold at most (Planner.prepare); None: as many as fit.
        self.recent_room: int | None = None
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
