"""Adding and removing a key in a policy file's text, every other byte of it kept.

`context-proxy keys` edits files people write by hand: their comments, quoting and layout
are theirs. So the file is not loaded and dumped again; the YAML parser only says where
the `keys` list and its entries are (character offsets), and the text is spliced there:
a new entry after the last one (on a line of its own in a block list, after a comma in a
flow list `[...]`), an entry removed with its line or its comma. The result is checked by
loading it as a policy before it is written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import yaml


class KeyEditError(Exception):
    """The file cannot be edited safely (not a mapping, `keys` not a list)."""


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """One entry of a policy's `keys`: its hash, and the label and date it was made with."""

    hash: str
    label: str = ""
    created: str = ""


def entry_text(entry: KeyEntry) -> str:
    """The entry as a one-line flow mapping (JSON strings are YAML double-quoted scalars)."""
    fields = [f"hash: {json.dumps(entry.hash)}"]
    if entry.label:
        # As written, not as JSON's escapes: YAML reads a character past U+FFFF escaped as
        # two UTF-16 halves as two lone surrogates, which no terminal can print.
        fields.append(f"label: {json.dumps(entry.label, ensure_ascii=False)}")
    if entry.created:
        fields.append(f"created: {json.dumps(entry.created)}")
    return "{" + ", ".join(fields) + "}"


def _root(text: str) -> yaml.MappingNode | None:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise KeyEditError(f"not valid YAML: {exc}") from None
    if node is None:
        return None
    if not isinstance(node, yaml.MappingNode):
        raise KeyEditError("the policy is not a mapping")
    return node


def _keys_node(root: yaml.MappingNode | None) -> yaml.SequenceNode | None:
    for key, value in root.value if root is not None else ():
        if key.value == "keys":
            if isinstance(value, yaml.ScalarNode) and value.tag.endswith(":null"):
                return None
            if not isinstance(value, yaml.SequenceNode):
                raise KeyEditError("`keys` is not a list")
            return value
    return None


def entries(text: str) -> list[KeyEntry]:
    """The file's key entries: `sha256:...` strings, or mappings with `hash`, `label` and
    `created`."""
    node = _keys_node(_root(text))
    found: list[KeyEntry] = []
    for item in node.value if node is not None else ():
        if isinstance(item, yaml.ScalarNode):
            found.append(KeyEntry(str(item.value)))
        elif isinstance(item, yaml.MappingNode):
            fields = {str(k.value): str(v.value) for k, v in item.value
                      if isinstance(v, yaml.ScalarNode)}  # fmt: skip
            found.append(KeyEntry(fields.get("hash", ""), fields.get("label", ""),
                                  fields.get("created", "")))  # fmt: skip
    return found


def with_key(text: str, entry: KeyEntry, team: str) -> str:
    """`text` with `entry` added to its `keys` (the list made if missing)."""
    root = _root(text)
    node = _keys_node(root)
    new = entry_text(entry)
    if node is None:
        if root is None:  # an empty file: the team named, then its keys
            return f"team: {team}\nkeys:\n  - {new}\n"
        body = text if text.endswith("\n") or not text else text + "\n"
        if any(k.value == "keys" for k, _ in root.value):  # `keys:` with nothing after it
            raise KeyEditError("`keys` is empty but present: give it a list, `keys: []`")
        return f"{body}keys:\n  - {new}\n"
    if node.flow_style:
        if node.value:
            at = node.value[-1].end_mark.index
            return f"{text[:at]}, {new}{text[at:]}"
        at = node.start_mark.index + 1  # just inside `[`
        return f"{text[:at]}{new}{text[at:]}"
    last = node.value[-1]
    line_start = text.rfind("\n", 0, node.value[0].start_mark.index) + 1
    dash = text.rfind("-", line_start, node.value[0].start_mark.index)
    indent = text[line_start:dash] if dash >= 0 else "  "
    end = text.find("\n", last.end_mark.index)
    end = len(text) if end < 0 else end
    return f"{text[:end]}\n{indent}- {new}{text[end:]}"


def without_key(text: str, key_hash: str) -> str:
    """`text` with the entry of `key_hash` removed from its `keys`."""
    node = _keys_node(_root(text))
    items = list(node.value) if node is not None else []
    index = next((n for n, e in enumerate(entries(text)) if e.hash.lower() == key_hash), None)
    if node is None or index is None:
        raise KeyEditError("no such key in the file")
    item = items[index]
    start, end = item.start_mark.index, item.end_mark.index
    if node.flow_style:
        if len(items) == 1:
            return text[:start] + text[end:]
        if index + 1 < len(items):  # up to the next entry: its comma and space go too
            return text[:start] + text[items[index + 1].start_mark.index :]
        previous_end = items[index - 1].end_mark.index
        return text[:previous_end] + text[end:]
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end + 1
    if len(items) == 1:  # the list goes empty: say so, or the file's `keys:` reads as null
        return _emptied(text, node, line_start, line_end)
    return text[:line_start] + text[line_end:]


def _emptied(text: str, node: yaml.SequenceNode, line_start: int, line_end: int) -> str:
    """`keys:` with its only block entry removed: `keys: []`."""
    head_end = text.rfind(":", 0, node.start_mark.index) + 1
    between = text[head_end:line_start]
    comment = between.strip() if between.strip().startswith("#") else ""
    return text[:head_end] + " []" + (f"  {comment}" if comment else "") + "\n" + text[line_end:]
