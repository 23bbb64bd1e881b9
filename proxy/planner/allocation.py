"""Planner: a layout's items with costs and a budget -> a decision for every item.

Required items first; then dedupe; then the budget's reservations and leftovers
(budget.grant); summaries stand in for clusters that lost members; blocks inside a
dropped tool group go with it. Works on the layout's columns and the choices' parallel
lists: a long plain history costs a few whole-list passes.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from itertools import chain, compress, repeat

from proxy.planner.budget import Choices, grant, reservations
from proxy.planner.choices import make_choices
from proxy.planner.clearing import Clearable, clearable, pick, trails_last
from proxy.planner.clusters import Substitution, settle
from proxy.planner.decisions import decide
from proxy.planner.dedupe import Dedupe, dedupe, may_repeat
from proxy.planner.items import MARKER, Action, Decision, Kind, Layout
from proxy.planner.overflow import overflow
from proxy.planner.tag_fields import section_policy
from proxy.policy import Policy
from proxy.relevance import TermIndex
from proxy.types import Overflow, Priority, Section, Strategy, Tokenizer


@dataclass(slots=True)
class Plan:
    made: dict[int, Decision]  # the decisions (those made so far, while `rest` is set)
    reserved: dict[Section, int]  # floor(B * ratio) per section
    allocated: dict[Section, int]  # what each section was granted, required items included
    rest: Callable[[], None] | None = None  # makes the others into `made`
    # Set when every item is kept whole or dropped (or deduped): which are kept, and
    # how many are dropped and deduped. Trim and the counts need no more, so most plans'
    # decisions are made only when the report asks for them.
    kept: list[bool] | None = None
    counts: dict[Action, int] | None = None

    @property
    def decisions(self) -> dict[int, Decision]:
        if self.rest is not None:
            self.rest()
            self.rest = None
        return self.made


class Planner:
    def __init__(
        self,
        layout: Layout,
        policy: Policy,
        tokenizer: Tokenizer,
        window: int | None,
        terms: TermIndex | None = None,
    ) -> None:
        self.layout = layout
        self.terms = terms if terms is not None else TermIndex()  # shared by re-plans
        self.policy = policy
        self.tokenizer = tokenizer
        self.window = window
        self.marker = tokenizer.count_text(MARKER)
        self.cost = layout.cost.copy()  # costs after dedupe's rewrites
        self.text: dict[int, str] = {}  # texts rewritten by dedupe (summary lines removed)
        self.sections = {s: section_policy(policy, s) for s in Section}
        score, recent = Strategy.SCORE, Strategy.RECENT
        self._prepared: tuple[Dedupe, Choices] | None = None  # dedupe, and the choices
        self._required: tuple[list[int], dict[Section, int]] | None = None
        # Old tool results that may be cleared, in order; those cleared for the last plan
        # (item key -> its decision), and their costs before.
        self._clearable: list[Clearable] = []
        self._optional: list[bool] = []
        self.cleared: dict[int, Decision] = {}
        self._uncleared: dict[int, int] = {}
        # Per section: score order, truncatable, recency (a run of the newest); its ratio
        # and its default priority's rank.
        self.modes: dict[Section, tuple[bool, bool, bool]] = {}
        self.ratios: dict[Section, float] = {}
        self.ranks: dict[Section, int] = {}
        truncate = Overflow.TRUNCATE
        for s, p in self.sections.items():
            self.modes[s] = (p.strategy is score, p.overflow is truncate, p.strategy is recent)
            self.ratios[s], self.ranks[s] = p.ratio, p.priority.rank

    def text_of(self, key: int) -> str:
        return self.text.get(key, self.layout.text[key])

    def plan(self, budget: int, fixed: int) -> Plan:
        """Decisions for `budget` tokens, of which `fixed` (request overhead) are spoken for."""
        layout = self.layout
        ratios = self.ratios
        required, by_section = self.required()
        cost = layout.cost
        available = budget - fixed - sum(by_section.values())
        reserved = {s: math.floor(budget * r) for s, r in ratios.items()}
        if available < 0:
            over = (-available, budget, fixed, self.marker)
            cut = overflow(self.layout, self.policy, self.tokenizer, self.window, required, over)
            return Plan(cut, reserved, dict(by_section))
        keep, msg, start = Action.KEEP, layout.msg, layout.current_start
        now, before = "required (current turn)", "required"
        decisions = {
            k: Decision(keep, now if msg[k] >= start else before, None, cost[k]) for k in required
        }
        if self._prepared is None:  # the same for every budget: made once, re-plans reuse it
            optional = [True] * len(cost)
            for k in required:
                optional[k] = False
            found = dedupe(layout, self._dedupable(optional)) if may_repeat(layout) else Dedupe()
            for key, (text, _) in found.rewritten.items():
                self.text[key] = text
                old = self.tokenizer.count_text(layout.text[key])
                # From the item's own cost: a re-plan must not take the saving off twice.
                self.cost[key] = max(0, cost[key] + self.tokenizer.count_text(text) - old)
            for key in found.removed:
                optional[key] = False
            choices = make_choices(self, optional)
            self._clearable = clearable(self, choices)
            self._prepared = found, choices
            self._optional = optional
        if self._clearable:  # old tool results: cleared as far as this budget needs
            self._clear(budget - fixed - sum(by_section.values()))
        found, choices = self._prepared
        for key, reason in found.removed.items():
            decisions[key] = Decision(Action.DEDUPE, reason)
        ranks = self.ranks
        left = reservations(budget, ratios, by_section)

        def run(active: list[int]) -> list[int]:
            return grant(choices, active, available, left, ranks)

        sub = settle(layout, choices, run)
        allocated = dict(by_section)
        if sub.given is not None and choices.keep is not None and choices.section:  # one section
            s = choices.section[0]
            allocated[s] = allocated.get(s, 0) + sum(sub.given)
        else:
            grants = sub.grants
            for c, s in enumerate(choices.section):
                allocated[s] = allocated.get(s, 0) + grants.get(c, 0)
        plan = Plan(decisions, reserved, allocated)
        whole = None if self.cleared else _whole(choices, sub, found)
        if whole is None:
            decide(self, choices, sub, found.rewritten, decisions)
            return plan
        kept = [True] * len(layout.msg)  # trim keeps what has no decision
        # Every choice one item (_whole says so): the dropped ones' keys.
        leads = choices.lead
        if leads is None:
            leads = list(chain.from_iterable(choices.items))
        gone = list(compress(leads, map(operator.not_, whole)))
        for k in gone:
            kept[k] = False
        for k in found.removed:
            kept[k] = False
        plan.kept, plan.counts = kept, {Action.DROP: len(gone), Action.DEDUPE: len(found.removed)}
        plan.rest = partial(decide, self, choices, sub, found.rewritten, decisions)
        return plan

    def _clear(self, room: int) -> None:
        """Clear old tool results (least relevant first) until the optional items fit in
        `room` tokens; the choices are made again when what is cleared changed."""
        layout, optional = self.layout, self._optional
        summaries = layout.spans.keys() | {k for k, f in layout.fields.items() if f.summary_of}
        for key in self.cleared:  # back to the uncleared costs before measuring the need
            self.cost[key] = self._uncleared[key]
            del self.text[key]
        wanted = sum(c for k, c in enumerate(self.cost) if optional[k] and k not in summaries)
        cleared = pick(self._clearable, wanted - room, room)
        if cleared.keys() == self.cleared.keys():
            for key, d in cleared.items():
                self.cost[key], self.text[key] = d.tokens, d.text or ""
            return
        for key, d in cleared.items():
            self._uncleared[key] = self.cost[key]
            self.cost[key], self.text[key] = d.tokens, d.text or ""
        self.cleared = cleared
        assert self._prepared is not None
        choices = make_choices(self, optional)
        trails_last(choices, cleared)
        self._prepared = self._prepared[0], choices

    def required(self) -> tuple[list[int], dict[Section, int]]:
        """The required items' keys, and their cost per section (the same for every plan)."""
        if self._required is None:
            layout = self.layout
            section, cost, priority = layout.section, layout.cost, layout.priority
            flags = map(operator.is_, priority, repeat(Priority.REQUIRED))
            keys = list(compress(range(len(priority)), flags))
            by_section: dict[Section, int] = {}
            for k in keys:
                by_section[section[k]] = by_section.get(section[k], 0) + cost[k]
            self._required = keys, by_section
        return self._required

    def _dedupable(self, optional: list[bool]) -> list[int]:
        """Keys of the optional items dedupe may compare (not tool group members)."""
        layout = self.layout
        kind, msg, fields = layout.kind, layout.msg, layout.fields
        units, unit_of = layout.units, layout.unit_of
        if not fields and len(units) == len(layout.base) == len(kind):
            return list(compress(range(len(optional)), optional))  # messages, each alone
        message, opaque, summary = Kind.MESSAGE, Kind.OPAQUE, Kind.SUMMARY
        out: list[int] = []
        for k in compress(range(len(optional)), optional):
            it_kind = kind[k]
            summary_of = k in fields and bool(fields[k].summary_of)
            if it_kind is message:
                if not summary_of and len(units[unit_of[msg[k]]]) == 1:
                    out.append(k)
            elif it_kind is not opaque and it_kind is not summary and not summary_of:
                out.append(k)
        return out


def _whole(choices: Choices, sub: Substitution, found: Dedupe) -> list[bool] | None:
    """Per choice, kept whole (True) or dropped, when every choice is one item, kept whole
    or dropped, with no summary, host or rewritten text involved; else None."""
    cost, given = choices.cost, sub.given
    n = len(cost)
    if sub.members or found.rewritten or given is None:
        return None
    if not choices.singles and (
        choices.host.count(None) != n or max(map(len, choices.items), default=1) != 1
    ):
        return None
    whole = list(map(operator.eq, given, cost))
    if whole.count(True) + given.count(0) != n or (0 in cost and 0 in compress(cost, whole)):
        return None  # cut to a grant (its decision says how), or kept at no cost
    return whole
