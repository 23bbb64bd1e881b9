"""Agent recall: the old tool results an agent's newest commands name, brought back in one
message at the end of a request planned as of a step boundary (agent_cache.py).

The boundary's plan was made for the commands of its time; the agent has moved on since.
The results its newest commands name (paths, identifiers, lines: agent_rank.agent_worth)
that the plan cleared, cut or dropped go in one system message after the newest results,
so the next step's prompt still starts with everything before it. On the agent runs at
16k: evidence recall 0.58 without it, 0.80 with at most 8% of the budget for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.planner.agent_rank import agent_worth
from proxy.planner.history import calls_text
from proxy.planner.items import Layout
from proxy.planner.outcome import PlanOutcome
from proxy.policy import Policy
from proxy.relevance import TermIndex
from proxy.types import Body, Tokenizer

RECALL_TOOLS_HEAD = "[context-proxy: tool results recalled from earlier in this task]"
_RESULTS = ("tool", "function")
MIN_ROOM = 64  # tokens: less holds no result worth the message
_RETRIES = 3  # counts are not quite additive: drop the least worth and try again

# Plans a body under a policy and a context window, cache mode off.
PlanAt = Callable[[Body, Policy, int], PlanOutcome]


@dataclass(slots=True)
class Recall:
    message: dict[str, str]
    at: int  # its index in the forwarded messages
    count: int  # results it holds


def with_recall(
    body: Body,
    policy: Policy,
    layout: Layout,
    full: Sequence[int],
    planned: list[Any],
    tail: list[Any],
    where: tuple[int, int],
    tokenizer: Tokenizer,
    terms: TermIndex | None,
    plan_at: PlanAt,
    context_window: int,
    result: PlanOutcome,
) -> tuple[Recall | None, PlanOutcome]:
    """The forwarded messages with the recall message, and its outcome; or no recall and
    `result` as it was when nothing worth recalling fits."""
    at, room = where
    stripped, roles = layout.stripped, layout.roles
    # The results the boundary's plan forwards as they came (not cleared, cut or dropped).
    forwarded_results = {
        _call_id(m): m for m in planned if isinstance(m, dict) and m.get("role") in _RESULTS
    }
    names = _tool_names(stripped)
    candidates = [
        i
        for i in range(at)
        if roles[i] in _RESULTS
        and forwarded_results.get(_call_id(stripped[i])) != stripped[i]
        and isinstance(stripped[i].get("content"), str)
        and stripped[i]["content"].strip()
    ]
    if not candidates:
        return None, result
    newest = [m for m in stripped if isinstance(m, dict) and calls_text(m)]
    newest = newest[-max(1, policy.tools.keep_recent) :]
    commands = "\n".join(calls_text(m) for m in newest)
    context = "\n".join(str(m.get("content") or "") for m in newest)
    texts = [stripped[i]["content"] for i in candidates]
    worth = agent_worth(texts, [full[i] for i in candidates], commands, context, terms)
    ranked = sorted(
        (j for j in range(len(candidates)) if worth[j] > 0.0),
        key=lambda j: (-worth[j], -candidates[j]),
    )
    used = tokenizer.count_message({"role": "system", "content": RECALL_TOOLS_HEAD})
    chosen: list[int] = []
    lines: dict[int, str] = {}
    for j in ranked:
        i = candidates[j]
        line = f"result of {names.get(_call_id(stripped[i]) or '', 'a tool')}:\n{texts[j]}"
        cost = tokenizer.count_text("\n\n" + line)
        if used + cost <= room:
            chosen.append(j)
            lines[j] = line
            used += cost
    forwarded = [*planned, *tail]
    position = _position(forwarded, len(planned))
    for _ in range(_RETRIES):
        if not chosen:
            break
        text = "\n\n".join([RECALL_TOOLS_HEAD, *(lines[j] for j in sorted(chosen))])
        message = {"role": "system", "content": text}
        messages = [*forwarded[:position], message, *forwarded[position:]]
        tried = plan_at({**body, "messages": messages}, policy, context_window)
        if not tried.changed:
            return Recall(message, position, len(chosen)), tried
        chosen.remove(min(chosen, key=lambda j: (worth[j], candidates[j])))
    return None, result


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


def _call_id(message: Any) -> str | None:
    found = message.get("tool_call_id") if isinstance(message, dict) else None
    return found if isinstance(found, str) else None


def _tool_names(messages: Sequence[Any]) -> dict[str, str]:
    """Tool call id -> the tool's name, from the assistant messages' calls."""
    names: dict[str, str] = {}
    for m in messages:
        calls = m.get("tool_calls") if isinstance(m, dict) else None
        for call in calls if isinstance(calls, list) else ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(call.get("id"), str):
                names[call["id"]] = str(function.get("name") or "a tool")
    return names
