"""Agent recall: the old tool results an agent's newest commands name, brought back in one
message at the end of a request planned as of a step boundary (agent.py).

The boundary's plan was made for the commands of its time; the agent has moved on since.
The results its newest commands name (paths, identifiers, lines: history/rank.py)
that the plan cleared, cut or dropped go in one user message after the newest results,
each quoted and said to be the result of its tool (never a system message: a fetched
page's text gains no privilege by being recalled), so the next step's prompt still starts
with everything before it. On the agent runs at
16k: evidence recall 0.58 without it, 0.80 with at most 8% of the budget for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.planner.cache.plan_at import PlanAt
from proxy.planner.history import RECALL_ROLE, Now, quote, worth
from proxy.planner.parts import Counted, Layout, Run, command_text, tool_name
from proxy.planner.report import PlanOutcome

RECALL_TOOLS_HEAD = "[context-proxy: tool results recalled from earlier in this task, quoted]"
_RESULTS = ("tool", "function")
MIN_ROOM = 64  # tokens: less holds no result worth the message
_RETRIES = 3  # counts are not quite additive: drop the least worth and try again


@dataclass(slots=True)
class Recall:
    message: dict[str, str]
    at: int  # its index in the forwarded messages
    count: int  # results it holds
    gone: frozenset[int] = frozenset()  # messages after the boundary given up for it


@dataclass(slots=True)
class Anchored:
    """A loop planned as of its step boundary: the plan of the messages before it (`head`,
    forwarding `planned`), the steps since (`tail`, as they came), and the whole request's
    outcome (`result`)."""

    at: int  # the boundary: the index of the first message after it
    step: int  # tokens between boundaries
    head: PlanOutcome
    planned: list[Any]
    tail: list[Any]
    result: PlanOutcome


def with_recall(
    run: Run, counted: Counted, anchored: Anchored, room: int, plan_at: PlanAt
) -> Recall | None:
    """The recall message (at most `room` tokens) added to the forwarded messages, and
    `anchored.result` made the outcome with it; None, and nothing changed, when nothing
    worth recalling fits."""
    layout, full, planned = counted.layout, counted.full, anchored.planned
    stripped, roles = layout.stripped, layout.roles
    # The results the boundary's plan forwards as they came (not cleared, cut or dropped).
    as_planned = {_key(m) for m in planned}
    candidates = [
        i
        for i in range(anchored.at)
        if roles[i] in _RESULTS
        and _key(stripped[i]) not in as_planned
        and isinstance(stripped[i].get("content"), str)
        and stripped[i]["content"].strip()
    ]
    if not candidates:
        return None
    acting = [i for i in range(len(stripped)) if command_text(layout, i)]
    newest = acting[-max(1, run.policy.tools.keep_recent) :]
    commands = "\n".join(command_text(layout, i) for i in newest)
    context = "\n".join(str(stripped[i].get("content") or "") for i in newest)
    texts = [stripped[i]["content"] for i in candidates]
    now = Now("", commands, context, loop=True)  # what the newest commands name
    values = worth(texts, [full[i] for i in candidates], [0] * len(texts), now, run.terms)
    ranked = sorted(
        (j for j in range(len(candidates)) if values[j] > 0.0),
        key=lambda j: (-values[j], -candidates[j]),
    )
    tokenizer = run.tokenizer
    used = tokenizer.count_message({"role": RECALL_ROLE, "content": RECALL_TOOLS_HEAD})
    chosen: list[int] = []
    lines: dict[int, str] = {}
    for j in ranked:
        i = candidates[j]
        line = quote(f"Result of {tool_name(stripped[i], _call_of(layout, i))}", texts[j])
        cost = tokenizer.count_text("\n" + line)
        if used + cost <= room:
            chosen.append(j)
            lines[j] = line
            used += cost
    forwarded = [*planned, *anchored.tail]
    position = _position(forwarded, len(planned))
    for _ in range(_RETRIES):
        if not chosen:
            break
        text = "\n".join([RECALL_TOOLS_HEAD, *(lines[j] for j in sorted(chosen))])
        message = {"role": RECALL_ROLE, "content": text}
        messages = [*forwarded[:position], message, *forwarded[position:]]
        assert run.window is not None  # cache mode plans only requests with a window
        tried = plan_at({**run.body, "messages": messages}, run.policy, run.window)
        if not tried.changed:
            anchored.result = tried
            return Recall(message, position, len(chosen))
        chosen.remove(min(chosen, key=lambda j: (values[j], candidates[j])))
    return None


def _position(forwarded: list[Any], planned: int) -> int:
    """Where the recall goes: at the end, after the newest results (so the next step's
    prompt starts with everything before it); before a trailing user or assistant message
    of the steps since the boundary (the turn's own words stay last)."""
    at = len(forwarded)
    while at > planned and _role(forwarded[at - 1]) not in _RESULTS:
        at -= 1
    return at if at > planned else len(forwarded)


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _key(message: Any) -> tuple[Any, ...]:
    """A message by what it says (whose, which call, what content)."""
    if not isinstance(message, dict):
        return (None, None, repr(message))
    content = message.get("content")
    text = content if type(content) is str else repr(content)
    return (message.get("role"), message.get("tool_call_id"), text)


def _call_of(layout: Layout, i: int) -> Any:
    """The message that made the call result i answers: the first of its unit."""
    return layout.stripped[layout.units[layout.unit_of[i]][0]]
