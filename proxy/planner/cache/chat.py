"""Cache mode for a conversation: planned as of its last step boundary, the turns since
appended whole, what the current question needs of the rest recalled just before it.

A chat over its budget, planned per request, changes the start of its prompt every turn:
the provider's prompt cache never hits. Here the conversation is planned as it stood at
its last step boundary (the first turn at or after k * step tokens from its start, k the
whole steps in it, step (1 - watermark) of the budget), by the ordinary planner at the
watermark's share of the budget: whole turns, the newest first, the older ones by
relevance to that turn. That plan is a function of the messages before the boundary
alone, so every turn until the next boundary forwards it unchanged, then the turns since,
as they came: the prompt grows by appending. What the current question needs that the
plan left out is recalled in one quoted user message just before the question (history/
recall.py), sized by how clearly the question points into the past (history/standout.py):
only the recall and the newest turn are new to the provider's cache. Where the plan would
not fit beside the turns since (a step too large for its budget), the request is planned
per request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import orjson

from proxy.planner.budget import count_forwarded, turns_placeholder
from proxy.planner.cache.agent import anchored_outcome
from proxy.planner.cache.agent_recall import Anchored, Recall
from proxy.planner.cache.plan_at import PlanAt
from proxy.planner.cache.stable_cut import boundary, step_of
from proxy.planner.history import (
    STATEMENT_WEIGHT,
    asks,
    carrying_on,
    now_of,
    query_texts,
    recall_message,
    speaker_line,
    standouts,
    without_own_label,
    worth,
)
from proxy.planner.parts import STRETCH, Counted, Head, Run, Turn, head_key, history_turns
from proxy.planner.report import PlanOutcome, PlanReport, Refused
from proxy.relevance import score_history

_LATER = 3  # boundaries tried, a step apart, before a request is planned per request


def plan_stable(run: Run, counted: Counted, plan_at: PlanAt) -> PlanOutcome | None:
    """The outcome for an over-budget conversation in cache mode; None when it cannot be
    planned this way (no turn before a boundary past its setup, or the plan and the turns
    since do not fit together): then the ordinary planner decides."""
    budget, window, policy, layout = run.budget, run.window, run.policy, counted.layout
    if budget is None or window is None:
        return None
    turns = [t for t in history_turns(layout) if t.question]
    starts = [t.question[0] for t in turns]
    if not starts:
        return None
    full = counted.full
    step = step_of(budget, policy.cache.watermark)
    # Steps of the history before the current turn: what the newest question adds moves
    # nothing, so the turns until the next step plan the same part the same way.
    history = [*full[: layout.current_start], 0]
    found = None
    for later in range(_LATER):
        # Turns since the boundary too long to go beside its plan (a long question, long
        # turns on a small budget): the boundary one step later, as the next requests
        # will find it while they are as long.
        at = min(boundary(history, [*starts, layout.current_start], step, later), len(history) - 1)
        if at <= starts[0] or budget - step <= 0:
            return None  # nothing but the setup before the boundary: nothing to plan
        head = _head(run, counted, plan_at, at, budget - step)
        if head is None:
            return None
        planned = list(head.body["messages"])
        tail = list(layout.stripped[at:])
        result = _fitting(run, counted, [*planned, *tail], plan_at)
        if result is not None:
            found = at, head, planned, tail, result
            break
        if at >= layout.current_start:
            break
    if found is None:  # the turns since the boundary do not fit beside its plan
        return None
    at, head, planned, tail, result = found
    anchored = Anchored(at, step, head, planned, tail, result)
    recall = _recall(run, counted, anchored, plan_at, budget - result.tokens_after, turns)
    return anchored_outcome(layout, counted, anchored, recall)


def _head(run: Run, counted: Counted, plan_at: PlanAt, at: int, budget: int) -> PlanOutcome | None:
    """The plan of the conversation before the boundary, at `budget` (its whole share of
    the room: no reserve for the answer, which the request as a whole keeps), as the
    question right after the boundary would have it planned (the turn before it is then
    the previous turn, kept but cut if it must be, not a current turn kept whole); from the
    worker's memo when it made it before (memo.py). None when it cannot be planned so."""
    policy = run.policy
    headed = replace(policy, budget=replace(policy.budget, ratio=1.0, reserve_output=False))
    messages = run.body["messages"]
    question, asked = messages[at], counted.full[at]
    body = {**run.body, "messages": messages[: at + 1]}

    summaries = [s for s in run.summaries if s.end <= at]  # of the part it plans only

    def plan() -> PlanOutcome | None:
        try:
            made = plan_at(body, headed, budget + asked, summaries=summaries, recall=False)
        except Refused:
            return None
        out = made.body["messages"]
        if not out or out[-1] is not question:
            return None  # the question itself was cut: no plan of the part before it
        return replace(made, body={**made.body, "messages": out[:-1]},
                       tokens_after=made.tokens_after - asked)  # fmt: skip

    memo = run.memo
    if memo is None:
        return plan()
    key = head_key(body["messages"], headed, budget, run.tokenizer.name, summaries)
    if key is None:
        return plan()
    known = memo.get(key)
    if known is not None:
        return _outcome(run, known, plan)
    made = plan()
    if made is not None:
        counts = (made.dropped, made.truncated, made.summarized, made.deduped, made.trimmed,
                  made.cleared)  # fmt: skip
        forwarded = list(made.body["messages"])
        size = len(orjson.dumps(forwarded, default=repr))  # its input was written: so is it
        memo.put(key, Head(forwarded, made.tokens_after, counts, tuple(made.problems), size))
    return made


def _outcome(run: Run, head: Head, plan: Callable[[], PlanOutcome | None]) -> PlanOutcome:
    """A memo's head as the outcome its plan gave (its report made by planning it again,
    when asked for: the hot path needs only what it forwards and its counts)."""
    dropped, truncated, summarized, deduped, trimmed, cleared = head.counts

    def report() -> PlanReport:
        made = plan()
        assert made is not None  # it was planned before, with the same inputs
        return made.report

    return PlanOutcome(
        {**run.body, "messages": head.messages}, True, None, None, 0, head.tokens_after,
        dropped, truncated, summarized, deduped, trimmed, list(head.problems),
        run.tokenizer.estimated, report, cleared,
    )  # fmt: skip


def _recall(
    run: Run, counted: Counted, anchored: Anchored, plan_at: PlanAt, free: int, turns: list[Turn]
) -> Recall | None:
    """The recall of what the current question needs of the turns the boundary's plan left
    out, in the cache policy's share of the budget; it goes in `anchored.result`. When it
    needs more room than the plan and the turns since leave, the newest of those turns but
    the newest `history.keep_recent` give theirs, newest first: the prompt before them
    stays what the provider cached. None when the question needs nothing or nothing fits."""
    policy, layout = run.policy, counted.layout
    cache, full = policy.cache, counted.full
    if policy.history.relevance != "bm25" or layout.current_start + 1 < len(layout.roles):
        # In an agent's loop (exchanges after the question) the recall would sit before
        # every step's exchanges and change as they grow: none of them would be cached.
        return None
    query, context = query_texts(layout)
    query = without_own_label(query)
    if not query.strip() or not turns:
        return None
    stripped, roles = layout.stripped, layout.roles
    lines = [  # the plain lines a recall may quote (speaker_line)
        i
        for i in range(layout.setup_end, layout.current_start)
        if roles[i] in ("user", "assistant")
        and type(c := stripped[i].get("content")) is str
        and c.strip()
        and not layout.commands.get(i)
        and not stripped[i].get("tool_calls")
    ]
    if not lines:
        return None
    texts = [stripped[i]["content"] for i in lines]
    scores = score_history(query, texts, context=context, index=run.terms)
    # What stands out of the history for this question (history/standout.py): the lines
    # whose relevance stands recall_floor deviations above the bulk, counted less for a
    # turn that asks nothing and for one that carries on from the message before it.
    weight = (1.0 if asks(query) else STATEMENT_WEIGHT) * (1.0 - carrying_on(scores))
    standing = [j for j, z in enumerate(standouts(scores)) if z * weight > cache.recall_floor]
    if not standing:
        return None
    at = anchored.at
    sent = {_key(m) for m in anchored.planned}

    def wanted(j: int, gone: set[int]) -> bool:
        i = lines[j]
        return i in gone if i >= at else _key(stripped[i]) not in sent

    assert run.budget is not None
    cap = int(cache.recall_share * run.budget)
    quoting = 8  # tokens a recalled line costs besides its text, about
    need = min(cap, sum(full[lines[j]] + quoting for j in standing if wanted(j, set())))
    if need <= 0:
        return None
    gone: set[int] = set()  # messages of the newest turns since the boundary given up
    given: list[Any] = []
    # The newest turns stay (the contract's newest first: never one of them gone while an
    # older one is kept whole); the ones before them since the boundary may give way.
    keep = max(1, policy.history.keep_recent)
    for turn in reversed([t for t in turns[:-keep] if t.question[0] >= at]):
        if free >= need:
            break
        members = [*turn.question, *turn.reply, *turn.attached]
        members += [i for u in turn.exchanges for i in layout.units[u]]
        gone.update(members)
        free += sum(full[i] for i in members)
        given.append(turn)
        need = min(cap, sum(full[lines[j]] + quoting for j in standing if wanted(j, gone)))
    room = min(free, cap)
    candidates = [j for j in standing if wanted(j, gone)]
    if not candidates or room <= 0:
        return None
    costs = [full[i] for i in lines]
    values = worth(texts, costs, [0] * len(texts), now_of(layout), run.terms, scores)

    def line_of(j: int) -> str | None:
        return speaker_line(layout.stripped[lines[j]])

    found = recall_message(line_of, candidates, values, room, run.tokenizer)
    if found is None:
        return None
    message, chosen = found
    tail: list[Any] = []
    first = min((t.question[0] for t in given), default=-1)
    for i in range(at, len(layout.stripped)):
        if i == first:
            recall = layout.recall_id(STRETCH, i)
            tail.append({"role": "user", "content": turns_placeholder(len(given), recall)})
        if i == layout.current_start:
            tail.append(message)
        if i not in gone:
            tail.append(layout.stripped[i])
    messages = [*anchored.planned, *tail]
    tried = _fitting(run, counted, messages, plan_at)
    if tried is None:
        return None
    anchored.result = tried
    return Recall(message, messages.index(message), len(chosen), frozenset(gone))


def _fitting(
    run: Run, counted: Counted, messages: list[Any], plan_at: PlanAt
) -> PlanOutcome | None:
    """The outcome forwarding `messages` as they are, when they fit the budget; None
    when not. Counted as the ordinary planner counts a request within its budget (each
    message the request sent keeps its count); its report made by that planner, when
    asked for."""
    budget, layout = run.budget, counted.layout
    assert budget is not None and run.window is not None
    body = {**run.body, "messages": messages}
    known = dict(zip(map(id, layout.stripped), counted.full, strict=True))
    tokens = count_forwarded(run.tokenizer, body, messages, known)
    if tokens > budget:
        return None
    window = run.window

    def report() -> PlanReport:
        return plan_at(body, run.policy, window).report

    return PlanOutcome(
        body, True, budget, window, tokens, tokens, 0, 0, 0, 0, 0, [],
        run.tokenizer.estimated, report,
    )  # fmt: skip


def _key(message: Any) -> tuple[Any, ...]:
    """A message by what it says (whose, what content)."""
    if not isinstance(message, dict):
        return (None, repr(message))
    content = message.get("content")
    return (message.get("role"), content if type(content) is str else repr(content))


__all__: Sequence[str] = ["plan_stable"]
