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

from proxy.planner.budget.choices import make_choices
from proxy.planner.budget.clearing import Clearable, clearable, may_clear, pick, trails_last
from proxy.planner.budget.clusters import Substitution, settle
from proxy.planner.budget.decide import decide
from proxy.planner.budget.grants import Choices, grant, reservations
from proxy.planner.budget.operator_parts import pin_first
from proxy.planner.budget.overflow import Over, overflow
from proxy.planner.budget.setup_cut import setup_cuts
from proxy.planner.budget.state import PlanState
from proxy.planner.budget.turn_recall import recall_room
from proxy.planner.history import Dedupe, dedupe, may_repeat
from proxy.planner.parts import Action, Decision, Kind, Layout, Run, max_output
from proxy.types import Priority, Section


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
    over: bool = False  # the required parts alone exceed the budget: held to the window

    @property
    def decisions(self) -> dict[int, Decision]:
        if self.rest is not None:
            self.rest()
            self.rest = None
        return self.made


class Planner:
    """Plans one request's items for a budget; its state (budget/state.py) is shared by the
    re-plans that tighten the budget until the forwarded request fits."""

    def __init__(self, layout: Layout, run: Run) -> None:
        self.state = PlanState(layout, run.policy, run.tokenizer, run.terms)
        self.layout = layout
        self.window = run.window
        self.answer = max_output(run.body) or 0  # the tokens max_tokens keeps for the answer
        self._budget = 0  # the budget prepared for
        self._prepared: tuple[Dedupe, Choices] | None = None  # dedupe, and the choices
        self._required: tuple[list[int], dict[Section, int]] | None = None
        # Old tool results that may be cleared, in order (made when a plan first needs
        # some cleared: excerpts cost their reading); the costs of those cleared for the
        # last plan before they were.
        self._clearable: list[Clearable] | None = None
        self._optional: list[bool] = []
        self._uncleared: dict[int, int] = {}
        self._capped = False  # what depends on the budget made (prepare)
        self.recall = 0  # tokens kept for the recall of omitted turns (turn_recall.py)
        self._recalls = run.recall  # whether this plan may make one

    def prepare(self, budget: int, fixed: int) -> None:
        """What depends on the budget and is made once, before any plan (re-plans that
        tighten it keep it): a setup over half of `budget` cut (setup_cut.py), its cut
        parts then required at their cut size; the operator's parts and the newest turns
        pinned (operator_parts.py); the room the recall holds at most (a share of what
        they leave)."""
        if self._capped:
            return
        self._capped = True
        self._budget = budget
        state = self.state
        cuts = setup_cuts(state, self.required()[0], budget)
        for key, decision in cuts.items():
            state.preset[key] = decision
            state.cost[key], state.text[key] = decision.tokens, decision.text or ""
        if cuts:
            self._required = None  # their costs changed
        required = sum(self.required()[1].values())
        left, window = budget - fixed - required, self.limit - fixed - required
        pinned = pin_first(state, (left, window))
        if state.preset.keys() - cuts.keys() or state.opening:
            self._required = None  # the pinned parts are required now
        self.recall = recall_room(state, left - pinned) if self._recalls else 0

    def plan(self, budget: int, fixed: int) -> Plan:
        """Decisions for `budget` tokens, of which `fixed` (request overhead) are spoken for."""
        state, layout = self.state, self.layout
        ratios = state.ratios
        required, by_section = self.required()
        cost = layout.cost
        available = budget - fixed - sum(by_section.values())
        reserved = {s: math.floor(budget * r) for s, r in ratios.items()}
        if available < 0:
            # A re-plan's tighter target tightens the limit as much (fit.py).
            limit = self.limit - (self._budget - budget)
            over = Over(-available, budget, fixed, state.marker, limit, self.answer)
            cut = overflow(state, self.window, required, by_section, over)
            return Plan(cut, reserved, dict(by_section), over=True)
        keep, msg, start = Action.KEEP, layout.msg, layout.current_start
        now, before = "required (current turn)", "required"
        decisions = {
            k: Decision(keep, now if msg[k] >= start else before, None, cost[k]) for k in required
        }
        decisions.update(state.preset)
        if self._prepared is None:  # the same for every budget: made once, re-plans reuse it
            optional = [True] * len(cost)
            for k in required:
                optional[k] = False
            for k in state.preset:  # pinned, or a setup's cut: decided already
                optional[k] = False
            found = dedupe(layout, self._dedupable(optional)) if may_repeat(layout) else Dedupe()
            count = state.tokenizer.count_text
            for key, (text, _) in found.rewritten.items():
                state.text[key] = text
                # From the item's own cost: a re-plan must not take the saving off twice.
                state.cost[key] = max(0, cost[key] + count(text) - count(layout.text[key]))
            for key in found.removed:
                optional[key] = False
            choices = make_choices(state, optional)
            self._prepared = found, choices
            self._optional = optional
            if not may_clear(state):
                self._clearable = []
        if self._clearable is None or self._clearable:  # cleared as far as this budget needs
            self._clear(available)
        found, choices = self._prepared
        for key, reason in found.removed.items():
            decisions[key] = Decision(Action.DEDUPE, reason)
        ranks = state.ranks
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
        # Turns are applied one by one (trim.py marks the stretches of those omitted).
        plain = not (state.cleared or state.preset or state.turns)
        whole = _whole(choices, sub, found) if plain else None
        if whole is None:
            decide(state, choices, sub, found.rewritten, decisions)
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
        plan.rest = partial(decide, state, choices, sub, found.rewritten, decisions)
        return plan

    def _clear(self, room: int) -> None:
        """Clear old tool results (least relevant first) until the optional items fit in
        `room` tokens; the choices are made again when what is cleared changed."""
        state, layout, optional = self.state, self.layout, self._optional
        cost, text = state.cost, state.text
        summaries = layout.spans.keys() | {k for k, f in layout.fields.items() if f.summary_of}
        for key in state.cleared:  # back to the uncleared costs before measuring the need
            cost[key] = self._uncleared[key]
            del text[key]
        wanted = sum(c for k, c in enumerate(cost) if optional[k] and k not in summaries)
        if self._clearable is None:
            if wanted <= room:  # nothing to clear for this budget (nor cleared before)
                return
            assert self._prepared is not None  # the choices as made before any clearing
            self._clearable = clearable(state, self._prepared[1])
        cleared = pick(self._clearable, wanted - room, room)
        if cleared.keys() == state.cleared.keys():
            for key, d in cleared.items():
                cost[key], text[key] = d.tokens, d.text or ""
            return
        for key, d in cleared.items():
            self._uncleared[key] = cost[key]
            cost[key], text[key] = d.tokens, d.text or ""
        state.cleared = cleared
        assert self._prepared is not None
        choices = make_choices(state, optional)
        trails_last(choices, cleared)
        self._prepared = self._prepared[0], choices

    @property
    def choices(self) -> Choices | None:
        """The choices of the last plan (None before any)."""
        return self._prepared[1] if self._prepared is not None else None

    @property
    def limit(self) -> int:
        """What the required parts may take alone: the context window less the answer's
        reserve and a margin (the contract's window - max_output - 16); the budget when
        no window is known."""
        if self.window is None:
            return self._budget
        return self.window - self.answer - 16

    def required(self) -> tuple[list[int], dict[Section, int]]:
        """The required items' keys, and their cost per section (the same for every plan)."""
        if self._required is None:
            layout = self.layout
            section, cost, priority = layout.section, self.state.cost, layout.priority
            flags = map(operator.is_, priority, repeat(Priority.REQUIRED))
            keys = list(compress(range(len(priority)), flags))
            by_section: dict[Section, int] = {}
            for k in keys:
                by_section[section[k]] = by_section.get(section[k], 0) + cost[k]
            opening = self.state.opening
            if opening is not None:  # its placeholder is required (pinned.py)
                s = section[opening.keys[0]]
                by_section[s] = by_section.get(s, 0) + opening.mask.tokens
            self._required = keys, by_section
        return self._required

    def _dedupable(self, optional: list[bool]) -> list[int]:
        """Keys of the optional items dedupe may compare (not tool group members)."""
        layout = self.layout
        kind, msg, fields = layout.kind, layout.msg, layout.fields
        units, unit_of = layout.units, layout.unit_of
        # A turn's messages are never deduped: a repeated question keeps its own reply.
        turns = self.state.turns
        if turns:
            optional = optional.copy()
            base = layout.base
            for turn in turns:
                for i in (*turn.question, *turn.reply, *turn.attached):
                    optional[base[i]] = False
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
