"""Read step of the Responses API: a Responses body as the neutral chat body the planner reads.

`instructions` becomes a system message first; a string `input` one user message; `message`
items chat messages; consecutive `function_call` items one assistant message with
`tool_calls`, each `function_call_output` a `tool` message (matched by `call_id`, as chat
matches `tool_call_id`; an output whose call is not in the input, with previous_response_id,
is opaque); a `reasoning` item travels with the item it precedes. Any other
item (web_search_call, custom tool calls, item_reference ...) is opaque: a system message
holding its JSON, so the planner counts it, and never drops it (untagged system text is
required); it is always written back as it came.

Every chat message carries MARK, the index of its Source: where its items are in `input`.
Approximate, said here once: reasoning items are not counted (their content is encrypted),
tools of every kind are counted (proxy.tokens.tool_kinds), an opaque item and a content
part the chat tokenizer does not know are counted as their JSON text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.tokens import deep_json_text

MARK = "x_item"  # the chat message's Source, by index; ignored by the chat tokenizer
PART_MARK = "x_part"  # a content part's index in the item's own content list
MESSAGE_ROLES = frozenset(("user", "assistant", "system", "developer"))
TEXT_PARTS = frozenset(("input_text", "output_text", "text"))


@dataclass(slots=True)
class Source:
    """Where a chat message came from: `kind` and the indices of its items in `input`
    (reasoning items first, then the item or the merged function calls, in input order)."""

    kind: str  # instructions | text | message | call | output | opaque
    items: list[int] = field(default_factory=list)
    main: int = -1  # the message or output item an edit applies to (not a reasoning item)


@dataclass(slots=True)
class Converted:
    body: dict[str, Any]  # the neutral chat body: model, messages, tools, budget fields
    messages: list[dict[str, Any]]  # the chat messages as made (kept ones come back as these)
    sources: list[Source]
    tagged: bool = False  # an input item carries x_context: never forwarded as it came


def is_responses_body(body: dict[str, Any]) -> bool:
    """A Responses body rather than a chat one: `input` or `instructions`, no `messages`."""
    return "messages" not in body and ("input" in body or "instructions" in body)


def to_chat(body: dict[str, Any]) -> Converted:
    messages: list[dict[str, Any]] = []
    sources: list[Source] = []

    def add(message: dict[str, Any], kind: str, items: list[int], main: int = -1) -> None:
        message[MARK] = len(sources)
        sources.append(Source(kind, items, main))
        messages.append(message)

    instructions = body.get("instructions")
    if isinstance(instructions, str):
        if instructions:
            add({"role": "system", "content": instructions}, "instructions", [])
    elif instructions is not None:
        add(opaque(instructions), "instructions", [])
    given = body.get("input")
    if isinstance(given, str):
        add({"role": "user", "content": given}, "text", [])
    tagged = False
    if isinstance(given, list):
        pending: list[int] = []  # reasoning items waiting for the item they precede
        open_call: dict[str, Any] | None = None  # the assistant message calls still merge into
        called: set[str] = set()
        for i, item in enumerate(given):
            kind = _kind(item)
            if kind is not None and "x_context" in item:
                tagged = True
            if kind == "reasoning":
                pending.append(i)
                continue
            call = _call(item) if kind == "function_call" else None
            if call is not None:
                called.add(call["id"])
                if open_call is not None:  # parallel calls: one assistant message
                    open_call["tool_calls"].append(call)
                    sources[open_call[MARK]].items += [*pending, i]
                else:
                    open_call = {"role": "assistant", "content": None, "tool_calls": [call]}
                    add(open_call, "call", [*pending, i])
                pending = []
                continue
            open_call = None
            call_id = item.get("call_id") if kind == "function_call_output" else None
            if kind == "function_call_output" and not (
                isinstance(call_id, str) and call_id in called
            ):
                kind = None  # its call is in a previous response: never dropped, as it came
            add(*_message(item, kind), [*pending, i], i)
            pending = []
        if pending:  # reasoning that precedes nothing goes with what it follows
            if sources and sources[-1].kind != "instructions":
                sources[-1].items += pending
            else:
                add(opaque([given[i] for i in pending]), "opaque", pending)
    neutral: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    given_tools = body.get("tools")
    if given_tools is not None:  # every kind counted by the chat tokenizer (tool_kinds.py)
        neutral["tools"] = given_tools
    choice = _tool_choice(body.get("tool_choice"))
    if choice is not None:
        neutral["tool_choice"] = choice
    limit = body.get("max_output_tokens")
    if isinstance(limit, int) and not isinstance(limit, bool):
        neutral["max_completion_tokens"] = limit
    if body.get("prompt_cache_key"):  # the client caches: cuts in steps (cache/mode.py)
        neutral["prompt_cache_key"] = body["prompt_cache_key"]
    return Converted(neutral, list(messages), sources, tagged)


def opaque(value: Any) -> dict[str, Any]:
    """A stand-in the planner counts as the value's JSON and keeps (untagged system text).
    A `<context` inside is escaped so that the planner never reads a tag in it."""
    return {"role": "system", "content": json_text(value).replace("<context", "\\u003ccontext")}


def json_text(value: Any) -> str:
    try:
        return orjson.dumps(value, default=str).decode()
    except TypeError:  # what orjson cannot write (past 254 levels, an integer past 64 bits)
        return deep_json_text(value)  # written without recursion, at any depth


def _kind(item: Any) -> str | None:
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"  # an easy input message: {role, content}
    return kind if isinstance(kind, str) else None


def _call(item: dict[str, Any]) -> dict[str, Any] | None:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
    if not (isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str)):
        return None  # not a call the planner can pair: opaque, kept as it came
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _message(item: Any, kind: str | None) -> tuple[dict[str, Any], str]:
    if kind == "function_call_output" and isinstance(item.get("call_id"), str):
        content = chat_content(item.get("output"))
        if content is not None:
            return {"role": "tool", "tool_call_id": item["call_id"], "content": content}, "output"
    role = item.get("role") if kind == "message" else None
    if isinstance(role, str) and role in MESSAGE_ROLES:  # a role of another type: opaque
        content = chat_content(item.get("content"))
        if content is not None:
            message = {"role": item["role"], "content": content}
            if "x_context" in item:
                message["x_context"] = item["x_context"]
            return message, "message"
    return opaque(item), "opaque"


def chat_content(content: Any) -> str | list[dict[str, Any]] | None:
    """A string stays one; a single text part becomes its text (the planner's plain case);
    other lists become chat parts, each marked with its index. None: not a content."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not all(isinstance(p, dict) for p in content):
        return None
    if len(content) == 1 and _part_type(content[0]) in TEXT_PARTS:
        text = content[0].get("text")
        if isinstance(text, str):
            return text
    return [{**_part(p), PART_MARK: j} for j, p in enumerate(content)]


def _part_type(part: dict[str, Any]) -> str | None:
    kind = part.get("type")
    return kind if isinstance(kind, str) else None  # an array or object is no type


def _part(part: dict[str, Any]) -> dict[str, Any]:
    kind, text = _part_type(part), part.get("text")
    if kind in TEXT_PARTS and isinstance(text, str):
        return {"type": "text", "text": text}
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return {"type": "refusal", "refusal": part["refusal"]}
    if kind == "input_image":
        url = part.get("image_url") or part.get("file_id") or ""
        return {"type": "image_url", "image_url": {"url": url, "detail": part.get("detail")}}
    # input_file, input_audio ...: counted as their JSON (approximate), written back as given
    return {"type": "text", "text": json_text(part)}


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, str):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return None
