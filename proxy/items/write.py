"""Write step of the Responses API: the planned chat messages back into a Responses body.

A message the planner kept as it was gives back its original items, the very values that
came in; a truncated or cleared one its items with the new text; function calls and opaque
items always as they came (the planner keeps or drops a call with its outputs, never edits
it); a message the proxy made (a summary) becomes a message item.
"""

from __future__ import annotations

from typing import Any

from proxy.items.read import MARK, PART_MARK, TEXT_PARTS, Converted

_NEW_ROLES = frozenset(("user", "assistant", "system", "developer"))


def to_responses(body: dict[str, Any], conv: Converted, planned: list[Any]) -> dict[str, Any]:
    """`body` with `instructions` and `input` as the planned chat messages say."""
    given: Any = body.get("input")
    items: list[Any] = []
    read = bool(conv.sources) and conv.sources[0].kind == "instructions"
    instructions: Any = None if read else body.get("instructions")  # "" made no message
    text_input: str | None = None  # the string input, when it is still there
    for m in planned:
        k = m.get(MARK) if isinstance(m, dict) else None
        if not isinstance(k, int) or not 0 <= k < len(conv.sources):
            items.append(_new_item(m))
            continue
        source, same = conv.sources[k], m is conv.messages[k]
        content = m.get("content")
        if source.kind == "instructions":  # only string instructions take an edit
            edited = isinstance(content, str) and isinstance(body["instructions"], str)
            instructions = content if edited and not same else body["instructions"]
        elif source.kind == "text":
            text_input = given if same or not isinstance(content, str) else content
            items.append({"role": "user", "content": text_input})
        elif same or source.kind in ("call", "opaque"):
            items += [_untagged(given[i]) for i in source.items]
        else:  # an edited message or output; its reasoning items as they came
            edit = source.main
            items += [
                _edited(given[i], source.kind, content) if i == edit else _untagged(given[i])
                for i in source.items
            ]
    out = dict(body)  # the body's keys in their order, two of them replaced
    if instructions is not None:
        out["instructions"] = instructions
    else:
        out.pop("instructions", None)
    if "input" in body or items:
        only_text = text_input is not None and len(items) == 1
        out["input"] = text_input if only_text else items
    return out


def _untagged(item: Any) -> Any:
    """An item as it came, but for its x_context tag (never forwarded, on any item)."""
    if isinstance(item, dict) and "x_context" in item:
        return {k: v for k, v in item.items() if k != "x_context"}
    return item


def _edited(item: dict[str, Any], kind: str, content: Any) -> dict[str, Any]:
    """The item with the planner's new text (its x_context tag removed)."""
    edited = {k: v for k, v in item.items() if k != "x_context"}
    key = "output" if kind == "output" else "content"
    edited[key] = _content(item.get(key), content, item.get("role"))
    return edited


def _content(original: Any, planned: Any, role: Any) -> Any:
    if isinstance(original, str) or not isinstance(original, list):
        return planned if isinstance(planned, str) else _text_of(planned)
    if isinstance(planned, str):  # a single text part, read as its text
        first = next((p for p in original if _text_part(p)), None)
        if first is None:
            return [{"type": _text_type(role), "text": planned}]
        return [_with_text(first, planned)]
    if not isinstance(planned, list):
        return original
    parts: list[Any] = []
    for p in planned:
        j = p.get(PART_MARK) if isinstance(p, dict) else None
        if not isinstance(j, int) or not 0 <= j < len(original):  # a part the planner added
            parts.append({"type": _text_type(role), "text": _text_of([p])})
            continue
        part = original[j]
        text = p.get("text")
        if _text_part(part) and isinstance(text, str) and text != part.get("text"):
            part = _with_text(part, text)
        parts.append(part)  # other parts (images, files) as they came
    return parts


def _text_part(part: Any) -> bool:
    kind = part.get("type") if isinstance(part, dict) else None
    return isinstance(kind, str) and kind in TEXT_PARTS  # an array or object is no type


def _with_text(part: dict[str, Any], text: str) -> dict[str, Any]:
    edited = {**part, "text": text}
    if "annotations" in edited:  # they point into the old text
        edited["annotations"] = []
    edited.pop("logprobs", None)
    return edited


def _text_type(role: Any) -> str:
    return "output_text" if role == "assistant" else "input_text"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts = [p.get("text") for p in content or () if isinstance(p, dict)]
    return "".join(t for t in texts if isinstance(t, str))


def _new_item(message: Any) -> dict[str, Any]:
    """A message the proxy made (a summary, a note) as a message item."""
    role = message.get("role") if isinstance(message, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return {
        "type": "message",
        "role": role if isinstance(role, str) and role in _NEW_ROLES else "system",
        "content": _text_of(content),
    }
