"""Policy fields that are lists: strings, passthrough routes, key hashes."""

from __future__ import annotations

import re
from typing import Any

import yaml

from proxy.policy.schema import INVALID, Problems, typed, where

_KEY_HASH = re.compile(r"sha256:[0-9a-fA-F]{64}")


def string_list(node: yaml.Node, problems: Problems, name: str = "value") -> Any:
    """A list of non-empty strings (tool names), as a tuple."""
    if not isinstance(node, yaml.SequenceNode):
        problems.add(node, f"{name} must be a list of names, got {where(node)}")
        return INVALID
    out: list[str] = []
    for item in node.value:
        value = typed(item, problems, name, (str,), "a name")
        if value is INVALID:
            continue
        if not value.strip():
            problems.add(item, f"{name}: a name must not be empty")
            continue
        out.append(value)
    return tuple(out)


_ROUTE = re.compile(r"(\*|GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) (/v1/[\w./*{}:-]*)")


def route_list(node: yaml.Node, problems: Problems, name: str = "passthrough") -> Any:
    """A list of 'METHOD /v1/path' routes (a `*` in the path matches any run of
    characters, as fnmatch reads it; `*` for the method, any method), as a tuple."""
    if not isinstance(node, yaml.SequenceNode):
        problems.add(node, f"{name} must be a list of 'METHOD /v1/path' routes, got {where(node)}")
        return INVALID
    out: list[str] = []
    for item in node.value:
        value = typed(item, problems, name, (str,), "a 'METHOD /v1/path' route")
        if value is INVALID:
            continue
        if not _ROUTE.fullmatch(value.strip()):
            example = "(e.g. 'GET /v1/models')"
            problems.add(item, f"{name}: {value!r} is not 'METHOD /v1/path' {example}")
            continue
        out.append(value.strip())
    return tuple(out)


_KEY_FIELDS = frozenset(("hash", "label", "created"))


def key_hash(node: yaml.Node, problems: Problems, name: str = "keys") -> Any:
    """A list of key hashes: `sha256:<hex>` strings, or mappings `{hash: "sha256:<hex>",
    label: ..., created: ...}` (what `context-proxy keys new` writes)."""
    if not isinstance(node, yaml.SequenceNode):
        problems.add(node, f"{name} must be a list of 'sha256:<hex>' strings, got {where(node)}")
        return INVALID
    out: list[str] = []
    for entry in node.value:
        item = _hash_node(entry, problems, name)
        if item is None:
            continue
        value = typed(item, problems, name, (str,), "a 'sha256:<64 hex digits>' string")
        if value is INVALID:
            continue
        if not _KEY_HASH.fullmatch(value):
            # Never echo what was written: it may be a raw key pasted by mistake.
            problems.add(
                item,
                f"{name}: each entry must be 'sha256:' and 64 hex digits "
                "(store the hash of a key, never the key itself)",
            )
            continue
        out.append(value.lower())
    return out


def _hash_node(entry: yaml.Node, problems: Problems, name: str) -> yaml.Node | None:
    """The node of an entry's hash: the entry, or its mapping's `hash`."""
    if not isinstance(entry, yaml.MappingNode):
        return entry
    fields: dict[str, yaml.Node] = {str(k.value): v for k, v in entry.value}
    unknown = sorted(set(fields) - _KEY_FIELDS)
    if unknown:
        problems.add(entry, f"{name}: unknown key {unknown[0]!r} (expected hash, label, created)")
    for field in ("label", "created"):
        if (
            field in fields
            and typed(fields[field], problems, f"{name}.{field}", (str,), "text") is INVALID
        ):
            return None
    if "hash" not in fields:
        problems.add(entry, f"{name}: an entry given as a mapping needs its `hash`")
        return None
    return fields["hash"]
