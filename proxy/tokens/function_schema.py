"""Tokens (function schemas): tools rendered the way OpenAI renders them into the prompt.

OpenAI shows the model its functions as a TypeScript namespace,
`namespace functions { // description\\ntype f = (_: { ... }) => any; }`. Rules, held to
API-reported counts in tests/data/count_fixtures.json:
- each property's description is a `// ` line above it, and, as openai/harmony renders
  them, a title, examples, `nullable` (" | null") and a default (`// default: ...`);
- nesting differs between the two request shapes: legacy `functions` (hmarr's gpt-3.5
  figures) indent nested properties two spaces per level and drop their descriptions;
  `tools` (pamelafox's figures) show nested descriptions and do not indent. Each rule
  alone misses the other source by up to 28% over or 9% under; split, both are exact;
- `anyOf`/`oneOf` and a list of types are unions (" | "), `allOf` an intersection (" & ");
- an enum is its values joined by " | " (strings quoted); `const` is shown as its type;
- arrays are `T[]`, objects `{ ... }`;
- `$ref` to `#/$defs/X` or `#/definitions/X` is shown in place, once; later uses show the
  name (so nothing blows up), which errs over, never under.
Any JSON a client sends renders without raising, in linear time: a part of the wrong
shape, or nested deeper than _MAX_DEPTH, is shown as its JSON text (more than OpenAI
would render: never an under-count).
"""

from __future__ import annotations

from typing import Any

_MAX_DEPTH = 32
_SIMPLE = {"string": "string", "number": "number", "integer": "number", "boolean": "boolean"}
_SIMPLE |= {"null": "null", "object": "object", "array": "any[]"}


def format_functions(functions: list[dict[str, Any]], legacy: bool = False) -> str:
    """The namespace OpenAI renders for `functions` (each a function's definition): as for
    `tools`, or, if `legacy`, as for a request's legacy `functions`."""
    return render_functions(functions, legacy)[0]


def render_functions(functions: list[dict[str, Any]], legacy: bool) -> tuple[str, int]:
    """format_functions' text, and the tokens the API counts less than that text: 1 for
    `tools` with a property that has no description and is not a string enum. pamelafox's
    figures show it (5 of 5 such requests, and none of the other 13); the cause is not
    known, so it is taken at most once per request (a wrong guess errs by one token)."""
    lines = ["namespace functions {", ""]
    less = False
    for function in functions:
        description = function.get("description")
        if description:
            lines.append(f"// {_text(description)}")
        name = _text(function.get("name"))
        parameters = function.get("parameters")
        if parameters is None:
            lines.append(f"type {name} = () => any;")
        elif not isinstance(parameters, dict):
            lines.append(f"type {name} = (_: {json_text(parameters)}) => any;")
        elif parameters.get("properties"):
            lines.append(f"type {name} = (_: {{")
            renderer = _Renderer(parameters, legacy)
            renderer.properties(parameters, 0, lines, 0)
            less = less or (renderer.undescribed and not legacy)
            lines.append("}) => any;")
        else:
            lines.append(f"type {name} = () => any;")
        lines.append("")
    lines.append("} // namespace functions")
    return "\n".join(lines), int(less)


class _Renderer:
    """One function's parameters: where its `$ref`s point, which were shown already."""

    def __init__(self, root: dict[str, Any], legacy: bool) -> None:
        self._root = root
        self._shown: set[str] = set()
        self._step = 2 if legacy else 0  # the indent a nesting level adds
        self._legacy = legacy
        self.undescribed = False  # a property without a description, other than a string enum

    def properties(self, schema: dict[str, Any], indent: int, out: list[str], depth: int) -> None:
        properties = schema.get("properties")
        if not isinstance(properties, dict):  # a list, a string...: its JSON text
            out.append(" " * indent + json_text(properties) + ",")
            return
        listed = schema.get("required")
        required = {r for r in listed if isinstance(r, str)} if isinstance(listed, list) else set()
        pad = " " * indent
        for name, prop in properties.items():
            notes = prop if isinstance(prop, dict) else {}
            if notes.get("title"):
                out += [f"{pad}// {_text(notes['title'])}", f"{pad}//"]
            nested = depth > 0  # legacy functions show only top-level descriptions
            if notes.get("description") and not (self._legacy and nested):
                out.append(f"{pad}// {_text(notes['description'])}")
            elif not notes.get("description") and not _string_enum(notes):
                self.undescribed = True
            if isinstance(notes.get("examples"), list) and notes["examples"]:
                out.append(f"{pad}// Examples:")
                out += [f"{pad}// - {json_text(example)}" for example in notes["examples"]]
            optional = "" if name in required else "?"
            # A type may span lines (an object): its first line follows the name.
            start = len(out)
            self.type(prop, indent, out, depth + 1)
            out[start] = f"{pad}{name}{optional}: {out[start]}"
            if notes.get("nullable") is True:
                out[-1] += " | null"
            out[-1] += "," + (
                f" // default: {json_text(notes['default'])}" if "default" in notes else ""
            )

    def type(self, prop: object, indent: int, out: list[str], depth: int) -> None:
        """Appends the lines of `prop`'s type (the first one not indented)."""
        if not isinstance(prop, dict) or depth > _MAX_DEPTH:
            out.append(json_text(prop))
            return
        ref = prop.get("$ref")
        if isinstance(ref, str):
            self._ref(ref, indent, out, depth)
            return
        for key, glue in (("anyOf", " | "), ("oneOf", " | "), ("allOf", " & ")):
            options = prop.get(key)
            if isinstance(options, list) and options:
                for i, option in enumerate(options):
                    start = len(out)
                    self.type(option, indent, out, depth + 1)
                    if i:
                        out[start - 1 : start + 1] = [out[start - 1] + glue + out[start]]
                return
        kind = prop.get("type")
        enum = prop.get("enum")
        if isinstance(enum, list) and enum:
            out.append(" | ".join(f'"{v}"' if isinstance(v, str) else json_text(v) for v in enum))
        elif isinstance(kind, list):
            out.append(" | ".join(_simple(k) for k in kind))
        elif kind == "object" and isinstance(prop.get("properties"), dict | list | str):
            out.append("{")
            self.properties(prop, indent + self._step, out, depth)
            out.append("}")  # OpenAI does not indent the closing brace
        elif kind == "array" and "items" in prop:
            start = len(out)
            self.type(prop["items"], indent, out, depth + 1)
            out[-1] += "[]"
            if len(out) - start > 1 or "|" in out[start]:  # a multi-part type needs brackets
                out[start] = "(" + out[start]
                out[-1] = out[-1][:-2] + ")[]"
        else:
            out.append(_simple(kind))

    def _ref(self, ref: str, indent: int, out: list[str], depth: int) -> None:
        name = ref.rsplit("/", 1)[-1]
        target: object = None
        for folder in ("#/$defs/", "#/definitions/"):
            defs = self._root.get(folder[2:-1])
            if ref.startswith(folder) and isinstance(defs, dict):
                target = defs.get(ref[len(folder) :])
        if target is None or ref in self._shown:
            out.append(name)
            return
        self._shown.add(ref)
        self.type(target, indent, out, depth + 1)


def _string_enum(prop: dict[str, Any]) -> bool:
    enum = prop.get("enum")
    return isinstance(enum, list) and bool(enum) and all(isinstance(v, str) for v in enum)


def _simple(kind: object) -> str:
    return _SIMPLE.get(kind, "any") if isinstance(kind, str) else "any"


def _text(value: object) -> str:
    return value if isinstance(value, str) else json_text(value)


def json_text(value: object) -> str:
    """Compact JSON of any parsed JSON value, without recursion (so any depth, linear time).
    Values that are not JSON types are shown by str()."""
    parts: list[str] = []
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            parts.append(item.text)
        elif isinstance(item, dict):
            stack.append(_Raw("}"))
            for i, (key, sub) in enumerate(reversed(list(item.items()))):
                stack += [sub, _Raw(_quote(str(key)) + ":")]
                if i < len(item) - 1:
                    stack.append(_Raw(","))
            stack.append(_Raw("{"))
        elif isinstance(item, list | tuple):
            stack.append(_Raw("]"))
            for i, sub in enumerate(reversed(item)):
                stack.append(sub)
                if i < len(item) - 1:
                    stack.append(_Raw(","))
            stack.append(_Raw("["))
        elif isinstance(item, str):
            parts.append(_quote(item))
        elif item is None or isinstance(item, bool):
            parts.append({None: "null", True: "true", False: "false"}[item])
        else:
            parts.append(str(item))
    return "".join(parts)


class _Raw:
    """Text json_text emits as it is (brackets, commas, keys)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
