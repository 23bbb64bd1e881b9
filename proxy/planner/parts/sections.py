"""Sections: a request's messages cut into items, each tagged with a section and a priority.

First match wins: the message's `x_context`; inline `<context>` blocks (each block its own
item); heading rules in system messages; defaults by position (system prompt, current
turn, the newest `keep_recent` turns, older history). The items go into the layout's
columns: a plain conversation is read in whole-list passes, a message with tags, blocks,
headings or an odd shape one at a time (split.py).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from itertools import compress, repeat
from typing import Any

from proxy.planner.parts.groups import Shape, Singles, setup_end, shape
from proxy.planner.parts.items import Kind, Layout
from proxy.planner.parts.messages import well_shaped
from proxy.planner.parts.split import split_message
from proxy.planner.parts.steps import text_steps
from proxy.planner.parts.tags import split_headings
from proxy.planner.parts.trust import operator_ids_kept
from proxy.policy import Policy
from proxy.types import Priority, Section

_SYSTEM_ROLES = frozenset(("system", "developer"))
_CHAT_ROLES = ("user", "assistant", "tool", "function")  # a tuple: a role may be unhashable
_PLAIN_ROLES = frozenset(_CHAT_ROLES)
_ROLES = _PLAIN_ROLES | _SYSTEM_ROLES
_CONTENT_TYPES = frozenset((str, type(None)))
_GROUP_ROLES = frozenset(("tool", "function"))  # only these join another message's unit
AGENT_HISTORY = "agent history"  # the tag of an older exchange in an agent loop
SETUP = "setup"  # the tag of a message before the first answer


def build_layout(
    messages: Sequence[Any], policy: Policy, *, checked: bool = False, setup: int | None = None
) -> Layout:
    """Every message cut into tagged items; a tool group takes one section and priority.

    `checked`: every message is already known to be well shaped and free of tags (no
    x_context, no `<context` in its text): saves a second look. `setup`: how many leading
    messages are the setup, when known from the request these were cut from."""
    layout = (checked and _plain_layout(messages, policy, setup)) or _general_layout(
        messages, policy, shape(messages, policy.tools.keep_recent, setup), checked
    )
    _unify_groups(layout)
    if layout.fields:
        operator_ids_kept(layout)
    return layout


def _priorities(sh: Shape, policy: Policy, n: int) -> list[Priority]:
    """Default priorities by position: required for the setup and from the current turn,
    high for the newest `keep_recent` turns, low before."""
    start, turn_of = sh.current_start, sh.turn_of
    recent_from = sh.current_turn - policy.history.keep_recent
    # turn_of is ascending: the high run starts at the first message of a recent turn.
    first = bisect_left(turn_of, recent_from, 0, start)
    out = (
        [Priority.LOW] * first
        + [Priority.HIGH] * (start - first)
        + [Priority.REQUIRED] * (n - start)
    )
    for i in sh.agent:  # older exchanges of an agent loop: history, kept by relevance
        out[i] = Priority.LOW
    out[: sh.setup_end] = [Priority.REQUIRED] * min(sh.setup_end, n)
    return out


def _tags(start: int, n: int, agent: tuple[int, ...], setup: int) -> list[str]:
    """How each message's default section was found: by position."""
    tags = ["default"] * start + ["current turn"] * (n - start)
    for i in agent:
        tags[i] = AGENT_HISTORY
    tags[:setup] = [SETUP] * setup
    return tags


def _setup_sections(roles: list[Any], setup: int) -> list[Section]:
    """The default sections: a user message of the setup is the request's goal (the task,
    its instructions or environment), every other message recent_messages."""
    section = [Section.RECENT_MESSAGES] * len(roles)
    for i in range(setup):
        if roles[i] == "user":
            section[i] = Section.GOAL
    return section


def _chat_priorities(roles: list[Any], policy: Policy) -> tuple[int, list[Priority]]:
    """The current turn's start and _priorities for messages with no tool result, from
    where the user messages are (turn t starts at the t-th): no turn number per message."""
    n = len(roles)
    count = roles.count("user")
    recent = count - policy.history.keep_recent  # the first turn kept high
    # Only the newest user messages matter: found by C-level scans from the end.
    newest = _last_users(roles, count - recent + 1 if 0 < recent <= count else 1)
    start = newest[-1] if newest else max(n - 1, 0)
    first = newest[0] if 0 < recent <= count else (0 if recent <= 0 else start)
    high_from = min(first, start)
    return start, (
        [Priority.LOW] * high_from
        + [Priority.HIGH] * (start - high_from)
        + [Priority.REQUIRED] * (n - start)
    )


def _last_users(roles: list[Any], k: int) -> list[int]:
    """Where the last `k` user messages are (ascending; fewer when there are fewer)."""
    backwards = roles[::-1]
    out: list[int] = []
    j = -1
    try:
        for _ in range(k):
            j = backwards.index("user", j + 1)
            out.append(len(roles) - 1 - j)
    except ValueError:
        pass
    out.reverse()
    return out


def _positions(roles: list[Any], role: str) -> list[int]:
    """Where `role` is in `roles`: found by C-level scans (a system prompt is rare)."""
    out: list[int] = []
    i = -1
    try:
        while True:
            i = roles.index(role, i + 1)
            out.append(i)
    except ValueError:
        return out


def _plain_layout(messages: Sequence[Any], policy: Policy, known: int | None) -> Layout | None:
    """Plain chat in whole-list passes: every message one string (or no) content item of
    a known role, no heading section; None when some message is not (then one by one)."""
    n = len(messages)
    get = dict.get  # every message a dict (checked): C-level passes
    roles: list[Any] = list(map(get, messages, repeat("role")))
    contents: list[Any] = list(map(get, messages, repeat("content")))
    try:
        kinds = set(roles)
    except TypeError:  # a role of an odd type (unhashable)
        return None
    if not kinds <= _ROLES or not set(map(type, contents)) <= _CONTENT_TYPES:
        return None
    texts: list[str] = contents if None not in contents else [c or "" for c in contents]
    units: Sequence[list[int]]
    agent: tuple[int, ...] = ()
    setup = setup_end(roles) if known is None else min(known, n)
    commands: dict[int, str] = {}
    if kinds.isdisjoint(_GROUP_ROLES) and not text_steps(messages, roles, setup).pairs:
        start, priority = _chat_priorities(roles, policy)  # every message a unit of its own
        units, unit_of = Singles(n), list(range(n))
        priority[:setup] = [Priority.REQUIRED] * setup
    else:  # tool groups, or a text agent's steps
        sh = shape(messages, policy.tools.keep_recent, setup)
        start, units, unit_of, agent = sh.current_start, sh.units, sh.unit_of, sh.agent
        priority, roles, commands = _priorities(sh, policy, n), sh.roles, sh.steps.commands
    tags = _tags(start, n, agent, setup)
    section = _setup_sections(roles, setup)
    if not kinds.isdisjoint(_SYSTEM_ROLES):
        headings = policy.headings
        for i in sorted(i for role in kinds & _SYSTEM_ROLES for i in _positions(roles, role)):
            text = texts[i]
            if "#" in text and any(s is not None for s, _ in split_headings(text, headings)):
                return None  # heading sections: items of their own
            section[i], priority[i], tags[i] = Section.SYSTEM_PROMPT, Priority.REQUIRED, "default"
    plain = [True] * n  # a role and a content only: text, plainly
    if list(map(len, messages)).count(2) == n and None not in contents:
        others: list[int] = []  # each a role and a content (a role: the type check above)
    else:
        others = list(compress(range(n), [len(m) != 2 or "content" not in m for m in messages]))
    for i in others:
        m, c = messages[i], contents[i]
        if type(c) is str and roles[i] in _PLAIN_ROLES:
            plain[i] = "tool_calls" not in m and "function_call" not in m
        else:
            plain[i] = not m.get("tool_calls") and not m.get("function_call")
    keys = list(range(n))  # base and msg: equal, as separate lists (summaries add items)
    return Layout(
        list(messages), roles, keys, {}, units, unit_of, start, keys.copy(), roles.copy(),
        [Kind.MESSAGE] * n, section, priority, texts, tags, plain, [0] * n,
        originals=messages, agent=frozenset(agent), setup_end=setup, commands=commands,
    )  # fmt: skip


def _general_layout(messages: Sequence[Any], policy: Policy, sh: Shape, checked: bool) -> Layout:
    n = len(messages)
    layout = Layout(
        [], [], [], {}, sh.units, sh.unit_of, sh.current_start,
        [], [], [], [], [], [], [], [], [], originals=messages, agent=frozenset(sh.agent),
        setup_end=sh.setup_end, commands=sh.steps.commands,
    )  # fmt: skip
    priorities = _priorities(sh, policy, n)
    position_tags = _tags(sh.current_start, n, sh.agent, sh.setup_end)
    planned, setup_sections = sh.roles, _setup_sections(sh.roles, sh.setup_end)
    kind = Kind.MESSAGE
    msg, role_col, kinds, sections, prios = (
        layout.msg,
        layout.role,
        layout.kind,
        layout.section,
        layout.priority,
    )
    texts, tags, plains = layout.text, layout.tag, layout.plain
    for i, message in enumerate(messages):
        # The common case, kept lean: an untagged text message outside the system prompt.
        if type(message) is dict and "x_context" not in message:
            content: Any = message.get("content")
            role = message.get("role")
            text = type(content) is str
            if (
                (text or content is None)
                and role in _CHAT_ROLES
                and (
                    checked
                    or (
                        (not text or "<" not in content or "<context" not in content)
                        and well_shaped(message)
                    )
                )
            ):
                key = len(msg)
                role = planned[i]  # a text agent's output is planned as a tool result
                layout.stripped.append(message)
                layout.roles.append(role)
                layout.base.append(key)
                msg.append(i)
                role_col.append(role)
                kinds.append(kind)
                sections.append(setup_sections[i])
                prios.append(priorities[i])
                tags.append(position_tags[i])
                if text:
                    texts.append(content)
                    plains.append("tool_calls" not in message and "function_call" not in message)
                else:  # a tool call without text: as the general case makes it
                    texts.append("")
                    plains.append(
                        not message.get("tool_calls") and not message.get("function_call")
                    )
                continue
        split_message(layout, i, message, policy, (sh.turn_of[i], sh.current_turn), planned[i])
    layout.cost = [0] * len(msg)
    return layout


def _unify_groups(layout: Layout) -> None:
    """A tool group is one unit: its messages share the first tagged member's section and
    priority, and a required item anywhere in it makes the whole group required."""
    if len(layout.units) == len(layout.base):
        return  # every message a unit of its own
    base, tag, section, priority = layout.base, layout.tag, layout.section, layout.priority
    required = Priority.REQUIRED
    for unit in layout.units:
        if len(unit) < 2:
            continue
        bases = [base[i] for i in unit]
        lead = next((b for b in bases if tag[b] == "x_context"), bases[0])
        whole = any(priority[k] is required for i in unit for k in layout.items_of(i))
        for b in bases:
            section[b] = section[lead]
            priority[b] = required if whole else priority[lead]
