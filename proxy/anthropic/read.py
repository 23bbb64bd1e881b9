"""Read step of Anthropic's Messages API: a Messages body as the neutral chat body the
planner reads.

`system` (a string or text blocks) becomes a system message first. Each user message's
`tool_result` blocks become `tool` messages (matched to the assistant's `tool_use` by
`tool_use_id`, as chat matches `tool_call_id`); the rest of its blocks one user message
after them. An assistant message becomes one assistant message: its text, its `tool_use`
blocks as `tool_calls`; its `thinking` and `redacted_thinking` blocks travel with it (never
parted from the `tool_use` they precede) and are not counted, like the Responses API's
reasoning items. Blocks the chat tokenizer does not know (documents, server tool blocks,
search results) count as their JSON; an image as the largest image (its size is not read).

Every chat message carries MARK, the index of its Source: which blocks of which message it
holds, so that the write step gives back the very blocks that came in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.items.read import MARK, PART_MARK, json_text
from proxy.tokens.tool_kinds import CACHE_SIGNAL, PROVIDER_OVERHEAD

# What Anthropic adds to a request on its own: a system prompt for tool use (346 tokens for
# the Claude 4 models with tool_choice auto, the most of any it publishes), and, with
# extended thinking on, text its published count example shows (88 tokens where the blocks
# alone estimate 75: counted as 32, a margin over it).
TOOL_USE_PROMPT = 346
THINKING_PROMPT = 32
SILENT_BLOCKS = frozenset(("thinking", "redacted_thinking"))
COMPACTION = "compaction"  # the summary the API's compaction made (context_management)
# An image is counted as the largest one (a URL that is never read counts so): Claude's
# own rule (width x height / 750, about 1,600 at most) is close to that.
IMAGE_STAND_IN = "anthropic:image"


@dataclass(slots=True)
class Source:
    """Where a chat message came from: `kind` (system | message | result), the message's
    index in `messages` (-1 for the system prompt) and the blocks it holds (None: the whole
    content, a string)."""

    kind: str
    message: int = -1
    blocks: list[int] | None = None


@dataclass(slots=True)
class Converted:
    body: dict[str, Any]  # the neutral chat body: model, messages, tools, max tokens
    messages: list[dict[str, Any]]  # the chat messages as made (kept ones come back as these)
    sources: list[Source]
    tagged: bool = False  # a message carries x_context: never forwarded as it came


ANTHROPIC_BLOCKS = frozenset(
    ("tool_use", "tool_result", "thinking", "redacted_thinking", "document", COMPACTION)
)


def is_messages_body(body: dict[str, Any]) -> bool:
    """A Messages body rather than a chat one: a top-level `system`, or a block only the
    Messages API has. (One of plain strings and no system plans alike either way.)"""
    messages = body.get("messages")
    if not isinstance(messages, list) or "input" in body:
        return False
    if "system" in body:
        return True
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") in ANTHROPIC_BLOCKS:
                return True
    return False


def to_chat(body: dict[str, Any]) -> Converted:
    conv = Converted({}, [], [])

    def add(message: dict[str, Any], source: Source) -> None:
        message[MARK] = len(conv.sources)
        conv.sources.append(source)
        conv.messages.append(message)

    system = body.get("system")
    if isinstance(system, str) and system:
        add({"role": "system", "content": system}, Source("system"))
    elif isinstance(system, list) and system:
        add({"role": "system", "content": _parts(system, range(len(system)))}, Source("system"))
    given = body.get("messages") or []
    answered: set[tuple[int, int]] = set()  # (message, block) of results read after their call
    for i, message in enumerate(given):
        if not isinstance(message, dict):
            continue
        if "x_context" in message:
            conv.tagged = True
        role, content = message.get("role"), message.get("content")
        if isinstance(content, str):
            chat: dict[str, Any] = {
                "role": role if role == "assistant" else "user",
                "content": content,
            }
            add(_tagged(chat, message), Source("message", i))
            continue
        blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        if not isinstance(content, list) or len(blocks) != len(content):
            blocks = []  # not blocks: the API will say so; counted as its JSON, kept
        if role == "assistant" and not blocks:  # nothing to read: its JSON, kept or dropped
            add({"role": "assistant", "content": json_text(content)}, Source("message", i))
            continue
        if role == "assistant":
            for j in _compactions(blocks):  # the conversation's summary: required, as it came
                add(_compaction(blocks[j]), Source("message", i, [j]))
            results = _results_in(given[i + 1] if i + 1 < len(given) else None)
            for piece in _pieces(blocks):
                made = _assistant(blocks, piece)
                add(made, Source("message", i, piece))
                for call in made.get("tool_calls") or ():
                    if call["id"] in results:  # each call's result right after it
                        j = results.pop(call["id"])
                        text = _result_text(given[i + 1]["content"][j])
                        add({"role": "tool", "tool_call_id": call["id"], "content": text},
                            Source("result", i + 1, [j]))  # fmt: skip
                        answered.add((i + 1, j))
            continue
        rest = [j for j in range(len(blocks)) if (i, j) not in answered]
        if rest or not blocks:  # a result its call did not just ask for stays a block here
            parts = _parts(blocks, rest) if blocks else json_text(content)
            chat = _tagged({"role": "user", "content": parts}, message)
            add(chat, Source("message", i, rest if blocks else None))
    conv.body = {"model": body.get("model"), "messages": conv.messages}
    given_tools = body.get("tools")
    listed = given_tools if isinstance(given_tools, list) else ()
    tools = [_tool(t) for t in listed if isinstance(t, dict)]
    if tools:
        conv.body["tools"] = tools
    # Anthropic's own prompts, for its models (other models served over this API by
    # compatible gateways do not get them)
    claude = "claude" in str(body.get("model")).lower()
    added = (TOOL_USE_PROMPT if tools else 0) + (THINKING_PROMPT if _thinks(body) else 0)
    if added and claude:
        conv.body[PROVIDER_OVERHEAD] = added
    limit = body.get("max_tokens")
    if isinstance(limit, int) and not isinstance(limit, bool):
        conv.body["max_completion_tokens"] = limit
    if _has_cache_points(body):  # the client caches: plan with stable cuts (cache/mode.py)
        conv.body[CACHE_SIGNAL] = "cache_control"
    return conv


def _has_cache_points(body: dict[str, Any]) -> bool:
    blocks: list[Any] = [*(body.get("tools") or ())] if isinstance(body.get("tools"), list) else []
    if isinstance(body.get("system"), list):
        blocks += body["system"]
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            blocks += content
    return any(isinstance(b, dict) and b.get("cache_control") for b in blocks)


def _thinks(body: dict[str, Any]) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _tagged(chat: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
    if "x_context" in message:
        chat["x_context"] = message["x_context"]
    return chat


def _results_in(message: Any) -> dict[str, int]:
    """The tool results a user message holds, by the id of the call they answer."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list) or message.get("role") != "user":
        return {}
    return {
        b["tool_use_id"]: j
        for j, b in enumerate(content)
        if isinstance(b, dict) and b.get("type") == "tool_result"
        and isinstance(b.get("tool_use_id"), str)
    }  # fmt: skip


def _compactions(blocks: list[dict[str, Any]]) -> list[int]:
    return [j for j, block in enumerate(blocks) if block.get("type") == COMPACTION]


def _compaction(block: dict[str, Any]) -> dict[str, Any]:
    """A `compaction` block (Anthropic's summary of everything before it, which the API
    reads in place of that history) as a message of its own that the planner must keep:
    untagged system text is required (never dropped or moved; written back as the very
    block that came, write.py). Counted as its summary's text."""
    content = block.get("content")
    text = content if isinstance(content, str) else json_text(block)
    return {"role": "system", "content": text}


def _pieces(blocks: list[dict[str, Any]]) -> list[list[int]]:
    """An assistant message's blocks in runs that each end with a `tool_use` (the thinking
    and text before it go with it); blocks after the last one join the last run. Claude
    Code sends a whole tool loop as one assistant message: each step is a piece the planner
    may keep, clear or drop with its result. A `compaction` block is in none (its own)."""
    pieces: list[list[int]] = [[]]
    for j, block in enumerate(blocks):
        if block.get("type") == COMPACTION:
            continue
        pieces[-1].append(j)
        if block.get("type") == "tool_use":
            pieces.append([])
    if not pieces[-1]:
        pieces.pop()
    elif len(pieces) > 1:  # trailing text after the last call: with that call
        trailing = pieces.pop()
        pieces[-1] += trailing
    return pieces


def _assistant(blocks: list[dict[str, Any]], piece: list[int]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for j in piece:
        block = blocks[j]
        kind = block.get("type")
        if kind == "tool_use" and isinstance(block.get("id"), str):
            function = {"name": str(block.get("name")), "arguments": json_text(block.get("input"))}
            calls.append({"id": block["id"], "type": "function", "function": function})
        elif kind not in SILENT_BLOCKS:
            parts.append({**_part(block), PART_MARK: j})
    message: dict[str, Any] = {"role": "assistant", "content": _plain(parts) if parts else None}
    if calls:
        message["tool_calls"] = calls
    elif not parts:
        message["content"] = ""
    return message


def _parts(content: list[Any], chosen: Any) -> str | list[dict[str, Any]]:
    return _plain([{**_part(content[j]), PART_MARK: j} for j in chosen])


def _plain(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """A single text part is its text (the planner's plain case)."""
    if len(parts) == 1 and parts[0].get("type") == "text":
        return str(parts[0]["text"])
    return parts


def _part(block: Any) -> dict[str, Any]:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text" and isinstance(block.get("text"), str):
        return {"type": "text", "text": block["text"]}
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": IMAGE_STAND_IN, "detail": "high"}}
    return {"type": "text", "text": json_text(block)}  # documents, server tools: their JSON


def _result_text(block: dict[str, Any]) -> str:
    """A tool result's content as one text (its text blocks, other blocks as JSON)."""
    content = block.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "\n".join(
            b["text"] if isinstance(b, dict) and isinstance(b.get("text"), str) else json_text(b)
            for b in content
        )
    return json_text(content)


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A client tool (name, description, input_schema) as a chat function; a server tool
    (bash, text editor, web search...) as it came, counted as its JSON."""
    if "input_schema" not in tool:
        return tool
    function = {"name": tool.get("name"), "description": tool.get("description"),
                "parameters": tool.get("input_schema")}  # fmt: skip
    return {"type": "function", "function": {k: v for k, v in function.items() if v is not None}}
