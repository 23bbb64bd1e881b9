"""Tag fields: x_context and inline block attributes read into section, priority and the rest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.planner.parts.items import Tag
from proxy.policy import DEFAULT_SECTIONS, Policy, SectionPolicy
from proxy.types import Priority, Section


def section_policy(policy: Policy, section: Section) -> SectionPolicy:
    return policy.sections.get(section) or DEFAULT_SECTIONS[section]


def read_tag(
    fields: Mapping[str, Any],
    inherit: Tag,
    policy: Policy,
    where: str,
    problems: list[str],
    source: str,
) -> Tag:
    """A tag from x_context or block attributes; missing or bad fields fall back to `inherit`."""
    tag = Tag(inherit.section, inherit.priority, source)
    raw = fields.get("section")
    if raw is not None:
        try:
            tag.section = Section(raw)
            tag.priority = section_policy(policy, tag.section).priority
        except ValueError:
            problems.append(
                f"{where}: unknown section {str(raw)[:40]!r}, using {inherit.section.value}"
            )
    raw = fields.get("priority")
    if raw is not None:
        try:
            tag.priority = Priority(raw)
        except ValueError:
            problems.append(f"{where}: bad priority {str(raw)[:40]!r}, using {tag.priority.value}")
    for name in ("id", "cluster"):
        value = fields.get(name)
        if isinstance(value, str | int) and not isinstance(value, bool):
            setattr(tag, name, str(value))
        elif value is not None:
            problems.append(f"{where}: {name} must be a string")
    raw = fields.get("score")
    if raw is not None:
        try:
            tag.score = float(raw)
        except (TypeError, ValueError):
            problems.append(f"{where}: score {str(raw)[:40]!r} is not a number")
    raw = fields.get("summary_of")
    if isinstance(raw, str):
        tag.summary_of = (raw,)
    elif isinstance(raw, list) and all(isinstance(c, str) for c in raw):
        tag.summary_of = tuple(raw)
    elif raw is not None:
        problems.append(f"{where}: summary_of must be a cluster name or a list of them")
    if tag.summary_of and fields.get("section") is None:
        tag.section = Section.CONVERSATION_SUMMARY
        if fields.get("priority") is None:
            tag.priority = section_policy(policy, tag.section).priority
    return tag
