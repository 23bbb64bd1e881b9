"""Frozen copy of proxy/planner/plain_plan.py (the old lean path, commit 70383c6), tests only.

Plain plan: the planner's lean path for plain chat (tests.planner.frozen_plain.chat), start to end.

It decides exactly as the general path (sections -> planner -> budget -> trim) decides for
such a request, from parallel lists: a choice per unit, one section (recent_messages) to
allocate, and decisions shared between equal items. Whatever it does not cover (a policy
that changes the recent_messages section, proxy-made summaries, required parts over the
budget) returns None, and the general path plans the request. tests/planner/test_plain_plan.py
holds both paths to the same outcome on random conversations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress
from typing import Any

from proxy.planner.budget.allocation import RECENT_SHARE
from proxy.planner.budget.fit import ATTEMPTS
from proxy.planner.parts.costs import count_message, overhead
from proxy.planner.parts.decision import MARKER, OVER_BUDGET, Action, Decision
from proxy.planner.parts.summaries import ExtraSummary
from proxy.planner.parts.tag_fields import section_policy
from proxy.policy import Policy
from proxy.relevance import TermIndex
from proxy.types import Body, Overflow, Priority, Section, Strategy, Tokenizer
from tests.planner.frozen_plain.chat import Chat, read_chat, repeats
from tests.planner.frozen_plain.order import Choices, order_choices


@dataclass(slots=True)
class PlainOutcome:
    out: list[Any]  # the forwarded messages
    after: int  # their count
    counts: dict[Action, int]  # items dropped, truncated, deduped
    allocated: dict[Section, int]
    problems: list[str]
    chat: Chat
    costs: list[int]
    removed: dict[int, str]  # deduped message -> why
    choices: Choices
    grants: list[int]
    cuts: dict[int, Decision]  # message -> its truncation

    def decisions(self) -> list[Decision]:
        """Every message's decision (= item key), as planner.plan makes them; only the
        report reads them, so they are made when it is asked for."""
        return _decide(self)


def plan_plain(
    body: Body,
    messages: list[Any],
    policy: Policy,
    tokenizer: Tokenizer,
    budget: int,
    fixed: int,
    costs: list[int],
    extra: Sequence[ExtraSummary],
    terms: TermIndex | None,
) -> PlainOutcome | None:
    """The plan of an over-budget plain request, or None to leave it to the general path.
    `costs`: each message's count; `fixed`: the request's overhead."""
    recent = section_policy(policy, Section.RECENT_MESSAGES)
    if recent.strategy is not Strategy.RECENT or recent.overflow is not Overflow.DROP:
        return None
    chat = read_chat(messages, policy)
    if chat is None:
        return None
    if any(0 <= s.start < s.end <= chat.start and s.text for s in extra):
        return None  # proxy-made summaries to place
    priority, required = chat.priority, Priority.REQUIRED
    by_section: dict[Section, int] = {}
    for i, p in enumerate(priority):
        if p is required:
            s = Section.SYSTEM_PROMPT if chat.system[i] else Section.RECENT_MESSAGES
            if i < chat.setup and chat.roles[i] == "user":
                s = Section.GOAL  # the task
            by_section[s] = by_section.get(s, 0) + costs[i]
    if sum(costs[: chat.setup]) > budget // 2:
        return None  # a setup over half the budget: its user parts are cut
    floor = fixed + sum(by_section.values())
    if floor > budget:
        return None  # required parts over the budget: reject or cut them
    removed = repeats(chat)
    marker = tokenizer.count_text(MARKER)
    recent_room = max(0, math.floor((budget - floor) * RECENT_SHARE))
    choices = order_choices(chat, costs, removed, policy, terms, (tokenizer, marker), recent_room)
    ratio = recent.ratio
    problems: list[str] = []
    flags = [p is required for p in priority]  # kept whole: the required ones, so far
    target = budget
    for attempt in range(ATTEMPTS):
        if target - floor < 0:
            return None  # the general path cuts the required parts
        left = max(0, math.floor(target * ratio) - by_section.get(Section.RECENT_MESSAGES, 0))
        grants = _allocate(choices, target - floor, left)
        cuts = _cuts(chat, costs, choices, grants, tokenizer, marker)
        out, after, kept = _forward(body, messages, flags, costs, choices, grants, cuts, tokenizer)
        if after <= budget:
            break
        excess = (after - budget) << attempt
        if target > floor:
            target = max(floor, target - excess)
        elif policy.budget.on_required_overflow == "truncate":
            target -= excess
        else:
            return None  # the general path raises ContextLengthExceeded
    else:
        problems.append(f"could not fit the budget of {budget:,} tokens; sent {after:,}")
    allocated = dict(by_section)
    if choices.lead:
        s = Section.RECENT_MESSAGES
        allocated[s] = allocated.get(s, 0) + sum(grants)
    dropped = len(messages) - kept - len(removed)
    counts = {Action.DROP: dropped, Action.TRUNCATE: len(cuts), Action.DEDUPE: len(removed)}
    return PlainOutcome(
        out, after, counts, allocated, problems, chat, costs, removed, choices, grants, cuts
    )


def _allocate(choices: Choices, available: int, reserved: int) -> list[int]:
    """budget.allocate for the choices of one section, in keep order: two runs, the high
    priority one contiguous (once one does not fit, the older ones wait)."""
    cost, groups = choices.cost, choices.groups
    n = len(cost)
    runs = ((0, choices.high, True), (choices.high, n, not choices.relevance))
    grants = [0] * n
    pool = available
    room = min(reserved, pool)
    for first, end, contiguous in runs:  # the section's reservation
        for c in range(first, end):
            if room <= 0:
                break
            need = cost[c]
            if need <= room:
                grants[c] = need
                room -= need
                pool -= need
            elif c in groups and groups[c][1] <= room:
                grants[c] = room
                pool -= room
                room = 0
            elif contiguous:
                break  # the rest of this run waits
    for first, end, contiguous in runs:  # what is left, by priority
        for c in range(first, end):
            if pool <= 0:
                return grants
            need = cost[c] - grants[c]
            if need == 0:
                continue
            if need <= pool:
                grants[c] = cost[c]
                pool -= need
            elif grants[c] > 0 or (c in groups and groups[c][1] <= pool):
                grants[c] += pool
                pool = 0
            elif contiguous:
                break
    return grants


def _cuts(
    chat: Chat,
    costs: list[int],
    choices: Choices,
    grants: list[int],
    tokenizer: Tokenizer,
    marker: int,
) -> dict[int, Decision]:
    """The truncations: a tool group granted less than its cost keeps all but its
    largest result whole, and that one cut to the rest (planner._item_decision)."""
    cuts: dict[int, Decision] = {}
    for c, (_, _, cut) in choices.groups.items():
        grant, full = grants[c], choices.cost[c]
        if 0 < grant < full and cut is not None:
            mine = grant - (full - costs[cut])
            text = chat.texts[cut]
            room = mine - (costs[cut] - tokenizer.count_text(text)) - marker
            cuts[cut] = Decision(
                Action.TRUNCATE,
                f"cut to {mine:,} of {costs[cut]:,} tokens",
                tokenizer.truncate_text(text, max(0, room)) + MARKER,
                mine,
            )
    return cuts


def _forward(
    body: Body,
    messages: list[Any],
    required: list[bool],
    costs: list[int],
    choices: Choices,
    grants: list[int],
    cuts: dict[int, Decision],
    tokenizer: Tokenizer,
) -> tuple[list[Any], int, int]:
    """trim.apply and fit.count_forwarded for plain chat: the forwarded messages (in order,
    the kept ones as they came), their count, and how many messages are kept."""
    flags = required.copy()
    lead, groups = choices.lead, choices.groups
    for c in compress(range(len(grants)), grants):  # granted anything: kept
        group = groups.get(c)
        if group is None:
            flags[lead[c]] = True
        else:
            for i in group[0]:
                flags[i] = True
    kept = flags.count(True)
    if not cuts:  # the common case: whole messages, as they came
        out = list(compress(messages, flags))
        total = sum(compress(costs, flags))
    else:
        out, total = [], 0
        for i in compress(range(len(flags)), flags):
            d = cuts.get(i)
            if d is None:
                out.append(messages[i])
                total += costs[i]
            else:
                cut = dict(messages[i])
                cut["content"] = d.text
                out.append(cut)
                total += count_message(tokenizer, cut)
    return out, total + overhead(tokenizer, body, out), kept


def _decide(plan: PlainOutcome) -> list[Decision]:
    """planner.plan's and _decide's decisions for plain chat; equal ones shared."""
    chat, costs, choices, grants = plan.chat, plan.costs, plan.choices, plan.grants
    keep, drop = Action.KEEP, Action.DROP
    required = Priority.REQUIRED
    decisions: list[Decision] = [None] * len(costs)  # type: ignore[list-item]
    start = chat.start
    for i, p in enumerate(chat.priority):
        if p is required:
            why = "required (current turn)" if i >= start else "required"
            decisions[i] = Decision(keep, why, None, costs[i])
    for i, reason in plan.removed.items():
        decisions[i] = Decision(Action.DEDUPE, reason)
    kept: dict[int, Decision] = {}
    dropped = {p: Decision(drop, reason) for p, reason in OVER_BUDGET.items()}
    groups, priority = choices.groups, chat.priority
    for c, lead in enumerate(choices.lead):
        grant, full = grants[c], choices.cost[c]
        group = groups.get(c)
        members = [lead] if group is None else group[0]
        if grant > 0 and grant == full:
            for i in members:
                d = kept.get(costs[i])
                if d is None:
                    d = kept[costs[i]] = Decision(keep, "fits the budget", None, costs[i])
                decisions[i] = d
        elif grant == 0:
            for i in members:
                decisions[i] = dropped[priority[i]]
        else:  # a tool group cut to its grant
            for i in members:
                found = plan.cuts.get(i)
                decisions[i] = found or Decision(keep, "fits the budget", tokens=costs[i])
    return decisions
