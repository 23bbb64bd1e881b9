"""Cache report: the plan report of a cache-mode request, in the request's own message numbers.

The ordinary planner reported on the shortened request; this puts back what the stable
cut dropped and numbers every item by its message in the request as it came, so the
report (and the summarizer, which reads which messages were dropped) see one request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from proxy.planner.parts import ExtraSummary, Layout
from proxy.planner.report import ItemReport, PlanOutcome, PlanReport, SectionReport
from proxy.types import Section

_RECENT, _SYSTEM = Section.RECENT_MESSAGES.value, Section.SYSTEM_PROMPT.value
_SUMMARY = Section.CONVERSATION_SUMMARY.value
_SUMMARY_PRIORITY = "medium"  # the section's default (the planner's summaries say the same)


@dataclass(slots=True)
class CacheCut:
    gone: list[int]  # message indexes dropped by the stable cut
    recalled: set[int]  # of those, the ones the recall message holds
    origin: list[int | None]  # shortened request's message -> request index (None: added)
    tokens: int  # history tokens before the cut
    step: int  # tokens the cut moves by
    # Summaries placed: shortened request's index -> (the request index it sits before, it)
    inserted: dict[int, tuple[int, ExtraSummary]] = field(default_factory=dict)
    summarized: set[int] = field(default_factory=set)  # dropped messages a summary covers


def message_items(
    layout: Layout, i: int, action: str, reason: str, *, kept: bool
) -> list[ItemReport]:
    """The report items of message i of the request as it came (its tags' ids and
    clusters with them, which the inclusion log reads), all kept or all gone."""
    fields = layout.fields
    out = []
    for k in layout.items_of(i):
        tag = fields.get(k)
        out.append(
            ItemReport(
                i,
                layout.kind[k].value,
                layout.role[k],
                layout.section[k].value,
                layout.priority[k].value,
                layout.tag[k],
                layout.cost[k],
                layout.cost[k] if kept else 0,
                action,
                reason,
                tag.id if tag is not None else None,
                tag.cluster if tag is not None else None,
            )
        )
    return out


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
            action = "summarize" if i in cut.summarized else "drop"
            if i in cut.summarized:
                why += "; a summary covers it"
            dropped[i] = message_items(layout, i, action, why, kept=False)
        added: dict[str, int] = {}  # tokens of what the cut added, planned as system messages
        items: list[ItemReport] = []
        for item in inner.items:
            origin = cut.origin[item.message] if item.message < len(cut.origin) else None
            if origin is not None:
                items.append(replace(item, message=origin))
                continue
            placed = cut.inserted.get(item.message)
            section = _RECENT if placed is None else _SUMMARY
            added[section] = added.get(section, 0) + item.tokens_after
            if placed is None:
                it = replace(
                    item,
                    message=layout.current_start,
                    kind="recall",
                    section=section,
                    priority="low",  # older history's: it is what was cut, brought back
                    tag="cache recall",
                    action="summary-inserted",
                    reason=f"{len(cut.recalled)} earlier turns recalled for the current turn",
                )
            else:
                at, summary = placed
                it = replace(
                    item,
                    message=at,
                    kind="summary",
                    section=section,
                    priority=_SUMMARY_PRIORITY,
                    tag="proxy summary",
                    action="summary-inserted",
                    reason=f"summary of messages {summary.start}-{summary.end - 1} "
                    f"({summary.key or 'proxy'}), placed at the stable cut",
                    id=summary.key or None,
                )
            items.append(it)
        for i in cut.gone:
            items.extend(dropped[i])
        # In message order; a stable sort keeps the recall item before the current turn's.
        report.items = sorted(items, key=_message)
        report.sections = _sections(inner.sections, cut, layout, added)
        return report

    return make


def _message(it: ItemReport) -> int:
    return it.message


def _sections(
    inner: Sequence[SectionReport], cut: CacheCut, layout: Layout, added: dict[str, int]
) -> list[SectionReport]:
    out = {s.section: replace(s) for s in inner}
    for i in cut.gone:
        for k in layout.items_of(i):
            st = _section(out, layout.section[k].value)
            st.wanted += layout.cost[k]
            if i in cut.summarized:
                st.summarized += 1
            else:
                st.dropped += 1
    system = out.get(_SYSTEM)
    for name, tokens in added.items():  # planned as system messages: they are history
        if system is not None:
            system.wanted -= tokens
            system.used -= tokens
            system.kept -= 1
        st = _section(out, name)
        st.used += tokens
        st.kept += 1
    return list(out.values())


def _section(out: dict[str, SectionReport], name: str) -> SectionReport:
    if name not in out:
        out[name] = SectionReport(name, "high", None, 0, 0, 0)
    return out[name]
