"""Cache report: the plan report of a cache-mode request, in the request's own message numbers.

The ordinary planner reported on the shortened request; this puts back what the stable
cut dropped and numbers every item by its message in the request as it came, so the
report (and the summarizer, which reads which messages were dropped) see one request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from proxy.planner.items import Layout
from proxy.planner.outcome import PlanOutcome
from proxy.planner.report import ItemReport, PlanReport, SectionReport
from proxy.types import Section

_RECENT, _SYSTEM = Section.RECENT_MESSAGES.value, Section.SYSTEM_PROMPT.value


@dataclass(frozen=True, slots=True)
class CacheCut:
    gone: list[int]  # message indexes dropped by the stable cut
    recalled: set[int]  # of those, the ones the recall message holds
    origin: list[int | None]  # forwarded-before-planning message -> request index (None: recall)
    tokens: int  # history tokens before the cut
    step: int  # tokens the cut moves by
    units: int  # history units
    cut: int  # units before the cut


def merged_report(
    result: PlanOutcome, layout: Layout, cut: CacheCut, before: int
) -> Callable[[], PlanReport]:
    """Makes the report on demand (the hot path needs only the counts)."""

    def make() -> PlanReport:
        inner = result.report
        report = PlanReport(
            inner.budget,
            inner.context_window,
            before,
            inner.tokens_after,
            inner.tokenizer,
            inner.estimated,
        )
        report.problems = list(inner.problems)
        dropped: dict[int, list[ItemReport]] = {}
        where = (
            f"before the cache-stable cut ({cut.tokens:,} history tokens, steps of {cut.step:,})"
        )
        for i in cut.gone:
            why = where + ("; recalled for the current turn" if i in cut.recalled else "")
            dropped[i] = [
                ItemReport(
                    i,
                    layout.kind[k].value,
                    layout.role[k],
                    layout.section[k].value,
                    layout.priority[k].value,
                    layout.tag[k],
                    layout.cost[k],
                    0,
                    "drop",
                    why,
                )
                for k in layout.items_of(i)
            ]
        recall_tokens = 0
        items: list[ItemReport] = []
        for item in inner.items:
            origin = cut.origin[item.message] if item.message < len(cut.origin) else None
            if origin is None:
                recall_tokens += item.tokens_after
                it = replace(
                    item,
                    message=layout.current_start,
                    kind="recall",
                    section=_RECENT,
                    tag="cache recall",
                    action="summary-inserted",
                    reason=f"{len(cut.recalled)} earlier turns recalled for the current turn",
                )
            else:
                it = replace(item, message=origin)
            items.append(it)
        for i in cut.gone:
            items.extend(dropped[i])
        # In message order; a stable sort keeps the recall item before the current turn's.
        report.items = sorted(items, key=_message)
        report.sections = _sections(inner.sections, cut, layout, recall_tokens)
        return report

    return make


def _message(it: ItemReport) -> int:
    return it.message


def _sections(
    inner: Sequence[SectionReport], cut: CacheCut, layout: Layout, recall_tokens: int
) -> list[SectionReport]:
    out = {s.section: replace(s) for s in inner}
    recent = out.get(_RECENT)
    if recent is None:
        recent = out[_RECENT] = SectionReport(_RECENT, "high", None, 0, 0, 0)
    for i in cut.gone:
        for k in layout.items_of(i):
            recent.wanted += layout.cost[k]
            recent.dropped += 1
    if recall_tokens:  # the recall message was planned as a system message: it is history
        system = out.get(_SYSTEM)
        if system is not None:
            system.wanted -= recall_tokens
            system.used -= recall_tokens
            system.kept -= 1
        recent.used += recall_tokens
        recent.kept += 1
    return list(out.values())
