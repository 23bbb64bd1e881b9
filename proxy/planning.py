"""Planning: the façade — a chat-completion body in, the body to forward and a report out.

Tag, count, and when over budget plan, trim, then count the result again: counts are not
additive over pieces of a message, so the plan is tightened until the real count fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.budget import compute_budget
from proxy.costs import count_message, measure, overhead
from proxy.errors import ContextLengthExceeded
from proxy.items import Action, Decision, Item, Kind, Layout
from proxy.plan_report import PlanReport, build_report
from proxy.planner import Plan, Planner
from proxy.policy import Policy
from proxy.sections import build_layout, section_policy
from proxy.trim import apply, with_note
from proxy.types import Body, Section, Tokenizer

SUMMARY_PREFIX = "[Summary of earlier conversation]\n"
_ATTEMPTS = 8


@dataclass(frozen=True, slots=True)
class ExtraSummary:
    """A proxy-made summary of messages[start:end], offered in place of what it covers."""

    start: int
    end: int
    text: str
    key: str = ""  # the summary cache's key, echoed in the report's reason


@dataclass(slots=True)
class PlanOutcome:
    body: Body
    changed: bool  # False: forward the request's original bytes
    budget: int | None
    context_window: int | None
    tokens_before: int
    tokens_after: int
    dropped: int
    truncated: int
    summarized: int
    deduped: int
    trimmed: int  # x-context-trimmed: messages or segments dropped, truncated or replaced
    report: PlanReport
    problems: list[str] = field(default_factory=list)
    estimated: bool = False


def max_output(body: Body) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def plan_request(
    body: Body,
    policy: Policy,
    tokenizer: Tokenizer,
    context_window: int | None,
    *,
    extra_summaries: Sequence[ExtraSummary] = (),
) -> PlanOutcome:
    """What to forward for `body` under `policy`; raises ContextLengthExceeded when the
    required parts alone exceed the budget and the policy says reject."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        messages = []
    layout = build_layout(messages, policy)
    full = measure(layout, tokenizer)
    stripped = [ml.stripped for ml in layout.messages]
    fixed = overhead(tokenizer, body, stripped)
    before = sum(full) + fixed
    budget = compute_budget(
        context_window, policy.budget.ratio, policy.budget.reserve_output, max_output(body)
    )
    note = policy.visibility.prompt_report and budget is not None
    decisions: dict[int, Decision] = {}
    plan: Plan | None = None
    if budget is None:
        out = stripped
        for it in layout.items:
            decisions[it.key] = Decision(Action.KEEP, "no context window known", tokens=it.cost)
    elif before + (_note_cost(tokenizer, budget, stripped) if note else 0) <= budget:
        out = stripped
    else:
        _add_summaries(layout, extra_summaries, tokenizer, policy)
        plan, out = _fit(layout, policy, tokenizer, body, budget, context_window, fixed, note)
        decisions = plan.decisions
    if note and budget is not None and plan is None:
        out = with_note(out, _note(layout, decisions, budget, before))
    after = sum(count_message(tokenizer, m) for m in out) + overhead(tokenizer, body, out)
    report = build_report(
        layout,
        decisions,
        policy,
        (budget, context_window, before, after),
        (tokenizer.name, tokenizer.estimated),
        plan.allocated if plan is not None else None,
    )
    counts = {a: report.count(a) for a in Action}
    trimmed = sum(
        counts[a] for a in (Action.DROP, Action.TRUNCATE, Action.DEDUPE, Action.SUMMARIZE)
    )
    changed = layout.tagged or trimmed > 0 or out is not stripped or bool(note)
    return PlanOutcome(
        body={**body, "messages": out} if changed else body,
        changed=changed,
        budget=budget,
        context_window=context_window,
        tokens_before=before,
        tokens_after=after,
        dropped=counts[Action.DROP],
        truncated=counts[Action.TRUNCATE],
        summarized=counts[Action.SUMMARIZE],
        deduped=counts[Action.DEDUPE],
        trimmed=trimmed,
        report=report,
        problems=report.problems,
        estimated=tokenizer.estimated,
    )


def _fit(
    layout: Layout,
    policy: Policy,
    tokenizer: Tokenizer,
    body: Body,
    budget: int,
    window: int | None,
    fixed: int,
    note: bool,
) -> tuple[Plan, list[Any]]:
    """Plan, trim and re-count until the forwarded messages fit the budget."""
    planner = Planner(layout, policy, tokenizer, window)
    reserve = fixed + (
        _note_cost(tokenizer, budget, [ml.stripped for ml in layout.messages]) if note else 0
    )
    floor = reserve + sum(it.cost for it in layout.items if it.required)
    target = budget
    for _ in range(_ATTEMPTS):
        plan = planner.plan(target, reserve)
        out = apply(layout, plan.decisions)
        if note:
            out = with_note(out, _note(layout, plan.decisions, budget, None))
        after = sum(count_message(tokenizer, m) for m in out) + overhead(tokenizer, body, out)
        if after <= budget:
            return plan, out
        excess = after - budget
        if target > floor:
            target = max(floor, target - excess)
        elif policy.budget.on_required_overflow == "truncate":
            target -= excess
        else:
            raise ContextLengthExceeded(
                f"The required parts of this request need {after:,} tokens but the budget "
                f"is {budget:,}; shorten the system prompt or the last message."
            )
    layout.problems.append(f"could not fit the budget of {budget:,} tokens; sent {after:,}")
    return plan, out


def _add_summaries(
    layout: Layout, extra: Sequence[ExtraSummary], tokenizer: Tokenizer, policy: Policy
) -> None:
    """Proxy-made summaries become optional items standing in for the spans they cover."""
    section = Section.CONVERSATION_SUMMARY
    priority = section_policy(policy, section).priority
    for s in extra:
        if not (0 <= s.start < s.end <= layout.current_start) or not s.text:
            continue
        message = {"role": "system", "content": SUMMARY_PREFIX + s.text}
        key = len(layout.items)
        item = Item(
            key,
            s.start,
            "system",
            Kind.SUMMARY,
            section,
            priority,
            message["content"],
            "proxy summary",
            id=s.key or None,
        )
        item.cost = tokenizer.count_message(message)
        layout.items.append(item)
        layout.extra[key] = message
        layout.spans[key] = (s.start, s.end)


def _note(layout: Layout, decisions: dict[int, Decision], budget: int, used: int | None) -> str:
    """The budget visibility block appended to the system prompt."""
    per: dict[str, int] = {}
    dropped = 0
    for it in layout.items:
        d = decisions.get(it.key)
        if d is None or d.kept:
            per[it.section.value] = per.get(it.section.value, 0) + (d.tokens if d else it.cost)
        else:
            dropped += 1
    total = used if used is not None else sum(per.values())
    share = f" ({100 * total // budget}%)" if budget else ""
    sections = ", ".join(f"{name} {n:,}" for name, n in per.items() if n)
    trimmed = f"; {dropped} item(s) left out to fit" if dropped else ""
    return f"Context budget: {total:,}/{budget:,} tokens{share}{trimmed}. By section: {sections}."


def _note_cost(tokenizer: Tokenizer, budget: int, messages: Sequence[Any]) -> int:
    """A generous estimate of the note's tokens, numbers at their widest."""
    names = ", ".join(f"{s.value} {budget:,}" for s in Section)
    sample = (
        f"Context budget: {budget:,}/{budget:,} tokens (100%); {budget} item(s) left out to fit."
        f" By section: {names}."
    )
    has_system = any(
        isinstance(m, dict) and m.get("role") in ("system", "developer") for m in messages
    )
    return tokenizer.count_text(sample) + (2 if has_system else 4)
