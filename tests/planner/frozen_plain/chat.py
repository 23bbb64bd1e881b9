"""Frozen copy of proxy/planner/plain_chat.py (the old lean path, commit 70383c6), tests only.

Plain chat: an untagged conversation read into parallel lists, for the lean planner.

Most requests are plain chat: no x_context, no inline tag, no heading section, each
message's content a string or nothing. Each of their messages is exactly one item of the
general path (sections.build_layout), with the item's key its message index; here what
the planner reads of those items is kept in lists instead of an Item, a MessageLayout
and a Part per message. `read_chat` returns None for anything else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress
from typing import Any, cast

from proxy.planner.parts.groups import shape
from proxy.planner.parts.messages import well_shaped
from proxy.planner.parts.steps import text_steps
from proxy.planner.parts.tags import split_headings
from proxy.policy import Policy
from proxy.types import Alongside, Priority, Tokenizer

_PLAIN_ROLES = frozenset(("user", "assistant", "tool", "function"))
_SYSTEM_ROLES = frozenset(("system", "developer"))
_ROLES = _PLAIN_ROLES | _SYSTEM_ROLES
_CONTENT_TYPES = frozenset((str, type(None)))
_GROUP_ROLES = frozenset(("tool", "function"))  # only these join another message's unit


@dataclass(slots=True)
class Chat:
    """A plain conversation as the planner sees it; index i is message i and item i."""

    messages: Sequence[Any]
    roles: list[str]
    texts: list[str]  # the item's text: the content, or "" for none
    system: list[bool]  # a system or developer message (section system_prompt)
    priority: list[Priority]  # tool groups unified, as sections._unify_groups does
    units: list[list[int]] | None  # None: every message a unit of its own
    unit_of: list[int] | None
    start: int  # the first message of the current turn
    setup: int = 0  # messages before the first assistant message: kept whole

    def plain(self, i: int) -> bool:
        """Item i is text only (no tool calls): it may be deduped by content. Decided as
        sections.build_layout decides it (its lean path looks at the keys of a text
        message of a conversation role, the general one at their values)."""
        m = self.messages[i]
        if self.roles[i] in _PLAIN_ROLES and type(m.get("content")) is str:
            return "tool_calls" not in m and "function_call" not in m
        return not m.get("tool_calls") and not m.get("function_call")


def _plain(m: Any) -> bool:
    """A message with no x_context, no inline tag, nothing of an odd shape."""
    if type(m) is not dict or "x_context" in m:
        return False
    content = m.get("content")
    if type(content) is str:
        # Only a role and a text: well shaped without looking further.
        return _no_tag(content) and ((len(m) == 2 and "role" in m) or well_shaped(m))
    return well_shaped(m) and (
        content is None
        or not any(isinstance(p, dict) and "<context" in str(p.get("text", "")) for p in content)
    )


def _no_tag(text: str) -> bool:
    # A search for one character is several times faster than for "<context", and most
    # texts have no "<" at all.
    return "<" not in text or "<context" not in text


def untagged_counts(
    messages: list[Any],
    tokenizer: Tokenizer,
    alongside: Alongside | None = None,
) -> list[int] | None:
    """Each message's count when no message has a tag or an odd shape (nothing to strip
    or report), else None. `alongside`: see ChatTokenizer.count_messages."""
    for m in messages:  # _plain's common case inlined: this runs per message
        if not (
            (
                type(m) is dict
                and len(m) == 2
                and type(content := m.get("content")) is str
                and "role" in m
                and ("<" not in content or "<context" not in content)
            )
            or _plain(m)
        ):
            return None
    many = getattr(tokenizer, "count_messages", None)  # tokens.ChatTokenizer's batch count
    if many is not None:
        return cast(list[int], many(messages, alongside))
    count = tokenizer.count_message
    return [count(m) for m in messages]


def read_chat(messages: Sequence[Any], policy: Policy) -> Chat | None:
    """`messages` as a Chat, or None when some message is not plain chat.

    The caller has checked every message is a well-shaped dict without x_context or
    `<context` (untagged_counts). Runs per request: whole-list passes only."""
    n = len(messages)
    roles = [m.get("role") for m in messages]
    contents = [m.get("content") for m in messages]
    try:
        kinds = set(roles)
    except TypeError:  # a role of an odd type (unhashable)
        return None
    if n == 0 or not kinds <= _ROLES or not set(map(type, contents)) <= _CONTENT_TYPES:
        return None
    texts: list[str] = [c or "" for c in contents]
    if kinds.isdisjoint(_SYSTEM_ROLES):
        system = [False] * n
    else:
        system = [r in _SYSTEM_ROLES for r in roles]
        headings = policy.headings
        for i in compress(range(n), system):
            text = texts[i]
            if "#" in text and any(s is not None for s, _ in split_headings(text, headings)):
                return None  # heading sections: items of their own
    users = [i for i, r in enumerate(roles) if r == "user"]
    setup = roles.index("assistant") if "assistant" in kinds else 0
    if text_steps(messages, roles, setup).pairs:
        return None  # a text agent: steps, planned as tool exchanges
    units: list[list[int]] | None = None
    unit_of: list[int] | None = None
    if kinds.isdisjoint(_GROUP_ROLES):  # no tool results: every message its own unit
        start = users[-1] if users else n - 1
    else:
        sh = shape(messages)
        units, unit_of, start = sh.units, sh.unit_of, sh.current_start
        last_user = users[-1] if users else -1
        if any(len(u) > 1 and u[0] < last_user for u in units):
            return None  # exchanges of earlier turns: ranked as an agent's (groups.py)
    # Turn t starts at the t-th user message; the newest keep_recent turns and the current
    # one are high priority: from the user message that starts turn len(users) - keep_recent.
    recent = len(users) - policy.history.keep_recent
    first = users[recent - 1] if 0 < recent <= len(users) else (0 if recent <= 0 else n)
    high_from = min(first, start)
    required = Priority.REQUIRED
    priority = [Priority.LOW] * high_from + [Priority.HIGH] * (start - high_from)
    priority += [required] * (n - start)
    for i in compress(range(start), system):
        priority[i] = required
    priority[:setup] = [required] * setup
    if units is not None:
        for unit in units:
            if len(unit) > 1:
                # The lead (an assistant message: only tool results join a unit) decides.
                lead = required if any(priority[i] is required for i in unit) else priority[unit[0]]
                for i in unit:
                    priority[i] = lead
    return Chat(messages, roles, texts, system, priority, units, unit_of, start, setup)


def repeats(chat: Chat) -> dict[int, str]:
    """dedupe.dedupe for plain chat: optional messages outside tool groups whose role and
    exact text (64 characters or more) repeat another's; the required, higher priority,
    then newest copy is kept."""
    texts, priority, required = chat.texts, chat.priority, Priority.REQUIRED
    candidates = [i for i, text in enumerate(texts) if len(text) >= 64]
    removed: dict[int, str] = {}
    if len({texts[i] for i in candidates}) == len(candidates):
        return removed  # the common case: no text twice
    candidates = [i for i in candidates if chat.plain(i)]
    if chat.units is not None:  # a tool group's optional messages go with their group
        units, unit_of = chat.units, chat.unit_of or []
        candidates = [
            i for i in candidates if priority[i] is required or len(units[unit_of[i]]) == 1
        ]
    first: dict[tuple[str, str], int] = {}
    twice: dict[tuple[str, str], list[int]] = {}
    for i in candidates:
        key = (chat.roles[i], texts[i])
        seen = first.setdefault(key, i)
        if seen != i:
            twice.setdefault(key, [seen]).append(i)
    for same in sorted(twice.values(), key=lambda same: same[0]):
        if any(priority[i] is not required for i in same):
            keep = min(same, key=lambda i: (priority[i].rank, -i))
            for i in same:
                if i != keep and priority[i] is not required:
                    removed[i] = f"same content as message {keep}"
    return removed
