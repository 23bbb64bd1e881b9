"""Trust: what a tag may claim, by where its text came from.

The operator's text (system and developer messages, the policy) outranks the client's
(user messages), which outranks the outside world's (tool results, a text agent's command
output) and the model's own (assistant messages). A tag can lower what its part is worth,
never raise it past what its origin allows: a user's tag cannot make its part required,
put it in the system prompt or the goal, nor take an id an operator's part holds; tags in
the model's text or the outside world's are not read at all (they are forwarded as
written, and an `x_context` field there is dropped unread).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from proxy.planner.parts.items import Layout, Tag
from proxy.types import Priority, Section

_OPERATOR_ONLY = (Section.SYSTEM_PROMPT, Section.GOAL)
_OPERATOR_ROLES = ("system", "developer")


def held_to_user(
    tag: Tag, inherit: Tag, fields: Mapping[str, Any], where: str, problems: list[str]
) -> None:
    """`tag`, read in a user message over `inherit` (what its part is without it), held to
    what a user's text may claim."""
    if tag.section in _OPERATOR_ONLY and fields.get("section") is not None:
        problems.append(f"{where}: a user message cannot tag a part {tag.section.value}")
        tag.section = inherit.section
        if fields.get("priority") is None:
            tag.priority = inherit.priority
    if tag.priority is Priority.REQUIRED and inherit.priority is not Priority.REQUIRED:
        problems.append(f"{where}: a user message cannot make a part required; high instead")
        tag.priority = Priority.HIGH


def unread(role: str) -> str:
    """Why an `x_context` field was not read."""
    if role in _OPERATOR_ROLES or role == "user":
        return "is not an object, ignored"
    return f"in a {role[:20]} message is not read (only system, developer and user ones are)"


def operator_ids_kept(layout: Layout) -> None:
    """A user's part that holds an id of an operator's part loses that id: the operator's
    part is the one that id names (and the one a dedupe by id keeps)."""
    fields, role = layout.fields, layout.role
    held = {f.id for k, f in fields.items() if f.id is not None and role[k] in _OPERATOR_ROLES}
    if not held:
        return
    for k, f in list(fields.items()):
        if f.id in held and role[k] not in _OPERATOR_ROLES:
            fields[k] = replace(f, id=None)
            layout.problems.append(
                f"message {layout.msg[k]}: id {f.id[:40]!r} is an operator's; not taken"
            )
