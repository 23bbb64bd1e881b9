"""Agent cache mode: an agent loop planned as of its last step boundary, newer steps appended.

An agent resends its whole loop every step, and the per-request plan re-decides which old
results to keep for the newest commands every step: the forwarded prompt changes near its
start each time, and the provider's prompt cache never hits (22% of trimmed prompt tokens
on the agent runs at 16k). Here the loop is planned as it stood at its last step boundary
(the first unit boundary at or after k * step tokens from its start, k the whole steps in
it), at the watermark's share of the budget, and the messages after that boundary go
after that plan as they came. That plan is a function of the boundary's prefix alone, so
every step until the next boundary forwards the same prefix and appends to it. The old
results that the newest commands name and that plan left out are brought back in one
message at the end (recalled: never cached, so it is small). A function of the request and
the policy alone, as a conversation's is (chat.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from proxy.planner.budget import RECENT_SHARE
from proxy.planner.cache.agent_recall import MIN_ROOM, Anchored, Recall, with_recall
from proxy.planner.cache.plan_at import PlanAt
from proxy.planner.cache.report import message_items
from proxy.planner.cache.stable_cut import boundary, step_of
from proxy.planner.parts import Counted, Layout, Run, history_turns
from proxy.planner.report import ItemReport, PlanOutcome, PlanReport, Refused, SectionReport
from proxy.types import Priority


def is_agent_loop(layout: Layout, full: Sequence[int]) -> bool:
    """Whether the request is an agent's loop: tool exchanges (calls with their results)
    carry most of it, at least two to a user message on average (a chat that calls a
    tool for some of its turns is planned as a conversation)."""
    exchanges = [unit for unit in layout.units if len(unit) > 1]
    users = layout.roles.count("user")
    if len(exchanges) < 2 * max(users, 1):
        return False
    tokens = sum(full[i] for unit in exchanges for i in unit)
    return 2 * tokens > sum(full)


def _keeps_current_turn(layout: Layout, at: int, planned: list[Any]) -> bool:
    """Whether the boundary's plan forwards as they came the messages before the boundary
    that this request must keep whole: its current turn (the last user message, the
    newest tool exchanges, a final assistant message). At the boundary they may have been
    its older exchanges, or a smaller budget may have cut them."""
    stripped = layout.stripped
    must = [stripped[i] for i in range(layout.current_start, at) if layout.in_current(i)]
    return all(any(m is p or m == p for p in planned) for m in must)


def _keeps_newest_turns(run: Run, counted: Counted, at: int, planned: list[Any]) -> bool:
    """Whether the boundary's plan forwards whole the questions and replies of this
    request's newest `history.keep_recent` turns before the boundary, when together they
    take at most the share of the room (beside the required parts) that the ordinary plan
    pins them in (budget/pinned.py): a boundary planned at a smaller budget may have left
    them out, and the recall would then fill their room with old tool results."""
    layout, full = counted.layout, counted.full
    turns = [t for t in history_turns(layout) if t.question or t.reply]
    newest = turns[-max(run.policy.history.keep_recent, 1) :]
    said = [i for t in newest for i in (*t.question, *t.reply)]
    if not said or run.budget is None:
        return True
    required = sum(
        c for c, p in zip(layout.cost, layout.priority, strict=True) if p is Priority.REQUIRED
    )
    room = run.budget - counted.fixed - required
    if sum(full[i] for i in said) > RECENT_SHARE * room:
        return True  # not all pinned by the ordinary plan either
    stripped = layout.stripped
    return all(any(stripped[i] is p or stripped[i] == p for p in planned) for i in said if i < at)


def plan_anchored(run: Run, counted: Counted, plan_at: PlanAt) -> PlanOutcome | None:
    """The outcome for an over-budget agent loop in cache mode; None when it cannot be
    planned this way (no boundary past the task, the plan refused, or the steps since the
    boundary do not fit beside it): then the ordinary planner decides."""
    budget, window, policy, layout = run.budget, run.window, run.policy, counted.layout
    if budget is None or window is None:
        return None
    body, full = run.body, counted.full
    step = step_of(budget, policy.cache.agent_watermark)
    at = boundary(full, [unit[0] for unit in layout.units if unit], step)
    first = next((i for i, r in enumerate(layout.roles) if r == "user"), len(full))
    if at <= first + 1 or budget - step <= 0:
        return None
    messages = body["messages"]
    anchored_policy = replace(
        policy, budget=replace(policy.budget, ratio=1.0, reserve_output=False)
    )
    try:
        head = plan_at({**body, "messages": messages[:at]}, anchored_policy, budget - step)
    except Refused:
        return None
    planned = list(head.body["messages"])
    if not _keeps_current_turn(layout, at, planned):
        return None  # the boundary's plan cut into what this request must keep whole
    if not _keeps_newest_turns(run, counted, at, planned):
        return None  # the boundary's smaller budget left out a turn this request pins
    tail = list(layout.stripped[at:])
    result = plan_at({**body, "messages": [*planned, *tail]}, policy, window)
    if result.changed:  # the steps since the boundary did not fit beside its plan
        return None
    anchored = Anchored(at, step, head, planned, tail, result)
    recall = None
    share = policy.cache.agent_recall_share
    room = min(budget - result.tokens_after, int(share * budget))
    if room >= MIN_ROOM:
        recall = with_recall(run, counted, anchored, room, plan_at)
    return anchored_outcome(layout, counted, anchored, recall)


def anchored_outcome(
    layout: Layout, counted: Counted, anchored: Anchored, recall: Recall | None
) -> PlanOutcome:
    """The request's outcome from a plan anchored at a step boundary: the tail's plan as
    sent, counted from the request as it came, with the head's cuts and everyone's
    problems."""
    head, result = anchored.head, anchored.result
    problems = list(dict.fromkeys([*layout.problems, *head.problems, *result.problems]))
    gone = sum(len(layout.items_of(i)) for i in recall.gone) if recall is not None else 0
    return replace(
        result,
        changed=True,
        tokens_before=counted.before,
        dropped=head.dropped + gone,
        truncated=head.truncated,
        summarized=head.summarized,
        deduped=head.deduped,
        trimmed=head.trimmed + gone,
        cleared=head.cleared,
        problems=problems,
        make_report=anchored_report(counted, anchored, recall, problems),
    )


def anchored_report(
    counted: Counted, anchored: Anchored, recall: Recall | None, problems: list[str]
) -> Callable[[], PlanReport]:
    """The report in the request's own message numbers: the boundary's plan for the
    messages before it, the steps since it kept, the recall added (on demand: the hot path
    needs only the counts)."""
    layout, at = counted.layout, anchored.at

    def make() -> PlanReport:
        inner, outer = anchored.head.report, anchored.result.report
        report = PlanReport(
            outer.budget,
            outer.context_window,
            counted.before,
            outer.tokens_after,
            outer.tokenizer,
            outer.estimated,
        )
        report.problems = list(problems)
        items: list[ItemReport] = [it for it in inner.items if it.message < at]
        sections = {s.section: replace(s) for s in inner.sections}
        steps = f"steps of {anchored.step:,} tokens"
        loop = bool(layout.agent) or any(r == "tool" for r in layout.roles[at:])
        what, why = ("tool results", "commands") if loop else ("parts of turns", "question")
        note = f"planned as of the step boundary at message {at} ({steps})"
        gone = recall.gone if recall is not None else frozenset()
        for i in range(at, len(layout.stripped)):  # the steps since: as they came
            if i in gone:  # given up for the recall, the newest turns kept
                why = f"after the boundary, given up for the recall; {note}"
                items += message_items(layout, i, "drop", why, kept=False)
                continue
            for it in message_items(layout, i, "keep", f"after the boundary; {note}", kept=True):
                _add(sections, it)
                items.append(it)
        for item in outer.items:
            if recall is not None and item.message == recall.at:
                it = replace(
                    item,
                    message=len(layout.stripped) - 1,  # it follows the newest message
                    kind="recall",
                    tag="cache recall",
                    action="summary-inserted",
                    reason=f"{recall.count} earlier {what} recalled for the newest {why}; {note}",
                )
                _add(sections, it)
                items.append(it)  # last: the stable sort below keeps it after that message
        report.items = sorted(items, key=_message)
        report.sections = list(sections.values())
        return report

    return make


def _add(sections: dict[str, SectionReport], it: ItemReport) -> None:
    st = sections.get(it.section)
    if st is None:
        st = sections[it.section] = SectionReport(it.section, it.priority, None, 0, 0, 0)
    st.wanted += it.tokens
    st.used += it.tokens_after
    st.allocated += it.tokens_after
    st.kept += 1


def _message(it: ItemReport) -> int:
    return it.message
