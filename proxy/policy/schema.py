"""Validators over YAML nodes, so every policy problem can name its file and line."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any

import yaml

# A field is a validator for a scalar or list node, a nested mapping of fields, or the name
# of a special handler (for blocks whose keys are free-form, such as `models`).
Validator = Callable[[yaml.Node, "Problems"], Any]
Field = Validator | dict[str, Any] | str


class Invalid:
    """Marks a value that failed validation (already reported), so it is left at its default."""


INVALID = Invalid()
_CONSTRUCTOR = yaml.SafeLoader("")
_LINE = re.compile(r":(\d+): ")


class Problems:
    """Collects `FILE:LINE: message` lines for one file."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: list[str] = []

    def add(self, node: yaml.Node, message: str) -> None:
        self.lines.append(f"{self.source}:{node.start_mark.line + 1}: {message}")

    def raise_if_any(self, error: Callable[[list[str]], Exception]) -> None:
        if self.lines:
            raise error(sorted(self.lines, key=_line_number))


def _line_number(problem: str) -> int:
    found = _LINE.search(problem)
    return int(found.group(1)) if found else 0


def _scalar(node: yaml.Node) -> Any:
    """The value of a scalar node, or INVALID when an explicit tag cannot build it
    (`!!int abc`, `!!python/name:...`): a problem to report, never a crash."""
    try:
        return _CONSTRUCTOR.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, KeyError, TypeError):
        return INVALID


def where(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    value = _scalar(node)
    return f"a value tagged {node.tag}" if value is INVALID else repr(value)


def check_mapping(
    node: yaml.Node,
    fields: dict[str, Any],
    problems: Problems,
    special: dict[str, Callable[[yaml.Node, Problems], Any]],
    path: str = "",
) -> dict[str, Any]:
    """Validate a mapping node against `fields`; return only the valid values."""
    out: dict[str, Any] = {}
    if not isinstance(node, yaml.MappingNode):
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null"):
            return out  # `upstream:` with nothing under it means "all defaults"
        problems.add(
            node, f"{path.rstrip('.') or 'the policy'} must be a mapping, got {where(node)}"
        )
        return out
    seen: set[str] = set()
    for key_node, value_node in node.value:
        key = str(key_node.value)
        if key in seen:
            problems.add(key_node, f"duplicate key {path}{key}")
            continue
        seen.add(key)
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.6)
            if close:
                problems.add(key_node, f"unknown key {path}{key!r}: did you mean {close[0]!r}?")
            else:
                known = ", ".join(fields)
                problems.add(key_node, f"unknown key {path}{key!r} (expected one of: {known})")
            continue
        field = fields[key]
        if isinstance(field, str):
            value = special[field](value_node, problems)
        elif isinstance(field, dict):
            value = check_mapping(value_node, field, problems, special, f"{path}{key}.")
        else:
            value = field(value_node, problems, f"{path}{key}")
        if value is not INVALID:
            out[key] = value
    return out


def typed(
    node: yaml.Node, problems: Problems, name: str, kinds: tuple[type, ...], what: str
) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        problems.add(node, f"{name} must be {what}, got {where(node)}")
        return INVALID
    value = _scalar(node)
    if value is INVALID:
        problems.add(node, f"{name} must be {what}, got {where(node)}")
        return INVALID
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        problems.add(node, f"{name} must be {what}, got {value!r}")
        return INVALID
    if isinstance(value, float) and not math.isfinite(value):
        problems.add(node, f"{name} must be a finite number, got {value!r}")
        return INVALID
    return value


def _as_written(node: yaml.Node) -> str | None:
    """The text of a bare word YAML 1.1 read as a boolean (`off`, `no`, `on`, `yes`...)."""
    if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":bool") and not node.style:
        return str(node.value)
    return None


def string(node: yaml.Node, problems: Problems, name: str = "value") -> Any:
    # `team: no` means the team "no", not false: a string field takes a bare word as written.
    written = _as_written(node)
    if written is not None:
        return written
    value = typed(node, problems, name, (str,), "a string")
    if isinstance(value, str) and not value.strip():
        problems.add(node, f"{name} must not be empty")
        return INVALID
    return value


def yes_no(node: yaml.Node, problems: Problems, name: str = "value") -> Any:
    return typed(node, problems, name, (bool,), "true or false")


def _number(
    node: yaml.Node,
    problems: Problems,
    name: str,
    test: Callable[[float], bool],
    what: str,
    kinds: tuple[type, ...] = (int, float),
) -> Any:
    value = typed(node, problems, name, kinds, what)
    if value is not INVALID and not test(value):
        problems.add(node, f"{name} must be {what}, got {value!r}")
        return INVALID
    return value


def ratio(node: yaml.Node, problems: Problems, name: str = "value") -> Any:
    return _number(node, problems, name, lambda v: 0 < v <= 1, "a ratio in (0, 1]")


def positive_number(node: yaml.Node, problems: Problems, name: str = "value") -> Any:
    return _number(node, problems, name, lambda v: v > 0, "a positive number")


def share(node: yaml.Node, problems: Problems, name: str = "value") -> Any:
    return _number(node, problems, name, lambda v: 0 <= v <= 1, "a share in [0, 1]")


def nonneg_number(node: yaml.Node, problems: Problems, name: str = "value") -> Any:
    return _number(node, problems, name, lambda v: v >= 0, "a number >= 0")


def positive_int(node: yaml.Node, problems: Problems, name: str = "value") -> Any:
    return _number(node, problems, name, lambda v: v > 0, "a positive integer", (int,))


def nonneg_int(node: yaml.Node, problems: Problems, name: str = "value") -> Any:
    return _number(node, problems, name, lambda v: v >= 0, "an integer >= 0", (int,))


def url(node: yaml.Node, problems: Problems, name: str = "value") -> Any:
    value = string(node, problems, name)
    if isinstance(value, str) and not re.match(r"https?://[^/\s]+", value):
        problems.add(node, f"{name} must be an http:// or https:// URL, got {value!r}")
        return INVALID
    return value


def opt(validator: Callable[..., Any]) -> Callable[..., Any]:
    """Allow `null` as well as what `validator` accepts."""

    def check(node: yaml.Node, problems: Problems, name: str = "value") -> Any:
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null"):
            return None
        return validator(node, problems, name)

    return check


def enum_of(
    choices: type[Enum] | Iterable[str], true: str | None = None, false: str | None = None
) -> Callable[..., Any]:
    """One of `choices`; `true`/`false` name the choice a YAML boolean (on/yes, off/no) means."""
    allowed = [c.value for c in choices] if isinstance(choices, type) else list(choices)
    as_enum = choices if isinstance(choices, type) else None

    def check(node: yaml.Node, problems: Problems, name: str = "value") -> Any:
        written = _as_written(node)
        # YAML 1.1 reads a bare `off` as false: take the word as written when it is a choice,
        # else the choice the field gives a boolean, else say how to write it.
        if written is not None and written.lower() in allowed:
            value: Any = written.lower()
        elif isinstance(node, yaml.ScalarNode) and isinstance(_scalar(node), bool):
            mapped = true if _scalar(node) else false
            if mapped is None:
                problems.add(
                    node,
                    f"{name} must be one of {', '.join(allowed)}, got {node.value!r} "
                    "(YAML reads it as a boolean)",
                )
                return INVALID
            value = mapped
        else:
            value = typed(node, problems, name, (str,), "one of " + ", ".join(allowed))
        if value is INVALID:
            return INVALID
        if value not in allowed:
            problems.add(node, f"{name} must be one of {', '.join(allowed)}, got {value!r}")
            return INVALID
        return as_enum(value) if as_enum is not None else value

    return check
