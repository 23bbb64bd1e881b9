"""Plan report: what the planner did, per section and per item, as data and as JSON."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.planner.parts import Action, Decision, Layout, section_policy
from proxy.policy import Policy
from proxy.types import Section


@dataclass(frozen=True, slots=True)
class ItemReport:
    message: int
    kind: str
    role: str
    section: str
    priority: str
    tag: str  # where the section came from: x_context, inline, heading, default, current turn
    tokens: int
    tokens_after: int
    action: str
    reason: str
    id: str | None = None
    cluster: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__slots__}
        return {k: v for k, v in out.items() if v is not None}


@dataclass(slots=True)
class SectionReport:
    section: str
    priority: str
    reserved: int | None  # floor(B * ratio)
    allocated: int  # what the planner granted it (required items included)
    wanted: int  # its items' tokens before trimming
    used: int  # its items' tokens after
    kept: int = 0
    dropped: int = 0
    truncated: int = 0
    deduped: int = 0
    summarized: int = 0
    cleared: int = 0  # old tool results replaced by a placeholder (their calls kept)

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__slots__}
        if not self.cleared:  # only where tool results were cleared: reports stay as they were
            del out["cleared"]
        return out


@dataclass(slots=True)
class PlanReport:
    budget: int | None
    context_window: int | None
    tokens_before: int
    tokens_after: int
    tokenizer: str
    estimated: bool
    sections: list[SectionReport] = field(default_factory=list)
    items: list[ItemReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def count(self, action: Action) -> int:
        return sum(1 for it in self.items if it.action == action.value)

    def to_json(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "context_window": self.context_window,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "tokenizer": self.tokenizer,
            "estimated": self.estimated,
            "counts": {
                a.value: n for a in Action if (n := self.count(a)) or a not in _ONLY_WHEN_SOME
            },
            "sections": [s.to_json() for s in self.sections],
            "items": [it.to_json() for it in self.items],
            "problems": list(self.problems),
        }


_COUNTERS = {
    Action.KEEP: "kept",
    Action.SUMMARY_INSERTED: "kept",
    Action.DROP: "dropped",
    Action.TRUNCATE: "truncated",
    Action.DEDUPE: "deduped",
    Action.SUMMARIZE: "summarized",
    Action.CLEAR: "cleared",
    Action.COMPACT: "kept",  # the same JSON: kept, its spaces aside
}
# Counted in a report only when some were (reports of requests without them stay as they were).
_ONLY_WHEN_SOME = (Action.CLEAR, Action.COMPACT)


def build_report(
    layout: Layout,
    decisions: Mapping[int, Decision],
    policy: Policy,
    totals: tuple[int | None, int | None, int, int],
    tokenizer: tuple[str, bool],
    allocated: Mapping[Section, int] | None = None,
) -> PlanReport:
    """The report; `totals` is (budget, context window, tokens before, tokens after)."""
    budget, window, before, after = totals
    report = PlanReport(budget, window, before, after, tokenizer[0], tokenizer[1])
    report.problems = list(layout.problems)
    stats: dict[Section, SectionReport] = {}
    for s in Section:
        sp = section_policy(policy, s)
        reserved = math.floor(budget * sp.ratio) if budget is not None else None
        stats[s] = SectionReport(s.value, sp.priority.value, reserved, 0, 0, 0)
    for it in layout.items:
        d = decisions.get(it.key) or Decision(Action.KEEP, "within budget", tokens=it.cost)
        tokens_after = d.tokens if d.kept else 0
        report.items.append(
            ItemReport(
                it.msg,
                it.kind.value,
                it.role,
                it.section.value,
                it.priority.value,
                it.tag,
                it.cost,
                tokens_after,
                d.action.value,
                d.reason,
                it.id,
                it.cluster,
            )
        )
        st = stats[it.section]
        st.wanted += it.cost
        st.used += tokens_after
        counter = _COUNTERS[d.action]
        if d.action is Action.DEDUPE and d.kept:
            counter = "deduped"
        setattr(st, counter, getattr(st, counter) + 1)
    for s, st in stats.items():
        st.allocated = allocated.get(s, 0) if allocated is not None else st.used
    report.sections = [st for st in stats.values() if st.wanted or st.allocated]
    return report
