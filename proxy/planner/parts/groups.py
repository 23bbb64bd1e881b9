"""Groups and turns: tool calls bound to their results, turn numbers, the current turn."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from proxy.planner.parts.steps import NO_STEPS, Steps, text_steps


class Singles(Sequence[list[int]]):
    """The units of n messages when each is a unit of its own: [0], [1], ... made when read
    (a long plain chat need not hold a list per message)."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> list[int]: ...
    @overload
    def __getitem__(self, i: slice) -> list[list[int]]: ...
    def __getitem__(self, i: int | slice) -> list[int] | list[list[int]]:
        if isinstance(i, slice):
            return [[k] for k in range(self.n)[i]]
        return [range(self.n)[i]]


@dataclass(frozen=True, slots=True)
class Shape:
    units: list[list[int]]  # message indexes of each unit, in order of first message
    unit_of: list[int]  # message index -> unit index
    turn_of: list[int]  # message index -> turn number (1 = from the first user message)
    current_start: int  # first message of the current turn
    current_turn: int
    # Agent history: messages of the older tool exchanges after the last user message
    # (all but the newest `keep_exchanges`), ascending; trimmable like older turns.
    agent: tuple[int, ...] = ()
    # Each message's role as planned: a text agent's outputs are "tool" (steps.py).
    roles: list[str] = field(default_factory=list)
    setup_end: int = 0  # the setup: messages before the first assistant message
    steps: Steps = NO_STEPS


def setup_end(roles: Sequence[str]) -> int:
    """Where the setup ends: at the first assistant message (0 when there is none: then
    the setup is the system messages alone, which are kept anyway)."""
    try:
        return roles.index("assistant")
    except ValueError:
        return 0


def role_of(message: Any) -> str:
    role = message.get("role") if isinstance(message, dict) else None
    return role if isinstance(role, str) else "?"


def _call_ids(message: Any) -> set[str]:
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    if not isinstance(calls, list):
        return set()
    return {c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)}


def shape(
    messages: Sequence[Any], keep_exchanges: int | None = None, setup: int | None = None
) -> Shape:
    """Units (a message alone, or an assistant tool call with all its results) and turns.

    A `tool` message belongs to the latest earlier assistant message that made its call; a
    legacy `function` message to the assistant `function_call` right before it. A tool
    message whose call is nowhere is a unit of its own.

    With `keep_exchanges`, the tool exchanges after the last user message (an assistant
    call with its results) but for the newest `keep_exchanges` are agent history. `setup`:
    how many leading messages are the setup, when known from the request this one was cut
    from (cache mode plans what it kept); else it ends at the first assistant message.
    """
    n = len(messages)
    unit_of = [-1] * n
    units: list[list[int]] = []
    open_calls: dict[str, int] = {}  # tool_call_id -> unit
    last_function_call = -1
    roles = []
    for m in messages:  # role_of, inlined for the common case: this runs per message
        role = m.get("role") if type(m) is dict else None
        roles.append(role if type(role) is str else role_of(m))
    setup = setup_end(roles) if setup is None else min(setup, n)
    steps = text_steps(messages, roles, setup) if "user" in roles[setup:] else NO_STEPS
    outputs = steps.outputs
    for i in outputs:  # a text agent's output: outside text, like a tool result
        roles[i] = "tool"
    for i, message in enumerate(messages):
        role = roles[i]
        tool_id = message.get("tool_call_id") if role == "tool" else None
        if isinstance(tool_id, str) and tool_id in open_calls:
            u = open_calls[tool_id]
            units[u].append(i)
        elif outputs and i in outputs:
            u = unit_of[i - 1]  # the step's command
            units[u].append(i)
        elif role == "function" and last_function_call >= 0:
            u = last_function_call
            units[u].append(i)
        else:
            u = len(units)
            units.append([i])
        unit_of[i] = u
        if role == "assistant":
            if "tool_calls" in message:
                for call_id in _call_ids(message):
                    open_calls[call_id] = u
            has_call = isinstance(message.get("function_call"), dict)
            last_function_call = u if has_call else -1
        elif role != "function":
            last_function_call = -1
    turn_of = [0] * n
    turn = 0
    last_user = -1
    for i, role in enumerate(roles):
        if role == "user":
            turn += 1
            last_user = i
        turn_of[i] = turn
    if last_user < 0:  # no user message: the last unit stands for the current turn
        last_user = units[unit_of[n - 1]][0] if n else 0
    # A tool group reaching back before the current turn joins it whole.
    start = min((units[unit_of[i]][0] for i in range(last_user, n)), default=last_user)
    agent: tuple[int, ...] = ()
    if keep_exchanges is not None and turn and len(units) < n:  # tool results: exchanges
        agent = _agent_history(units, unit_of, roles, last_user, keep_exchanges)
    return Shape(units, unit_of, turn_of, start, turn, agent, roles, setup, steps)


def _agent_history(
    units: list[list[int]], unit_of: list[int], roles: list[str], last_user: int, keep: int
) -> tuple[int, ...]:
    """Messages of the exchanges that are history: those after `last_user` but the newest
    `keep` (an agent at work), and every one of earlier turns (an agent loop interrupted
    by a user message, such as a format reminder; a chat that calls tools between its
    turns). An exchange is ranked by what its results hold, like any other history, not
    kept for the recency of the turn it belongs to (tau-airline at 2,800 tokens: evidence
    recall 0.31 -> 0.43, with the ranking of history/rank.py)."""
    # An exchange: a call with its results (a unit of more than one message); units are
    # in order of their first message.
    exchanges = [
        u for u in range(len(units)) if len(units[u]) > 1 and roles[units[u][0]] == "assistant"
    ]
    after = [u for u in exchanges if units[u][0] > last_user]
    kept = set(after[max(0, len(after) - keep) :])
    # Older exchanges: those after the last user message but the newest `keep`, and every
    # one of earlier turns (a tool group that reaches past the last user message is the
    # current turn's).
    older = [
        u
        for u in exchanges
        if u not in kept and (units[u][0] > last_user or units[u][-1] < last_user)
    ]
    return tuple(sorted(i for u in older for i in units[u]))
