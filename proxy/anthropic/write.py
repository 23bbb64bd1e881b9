"""Write step of Anthropic's Messages API: the planned chat messages back into a Messages
body that the API accepts.

A kept message gives back its original blocks, the very values that came in (with their
`cache_control` points); a truncated one its blocks with the new text; a cleared tool
result its `tool_result` block with the placeholder as content (its `tool_use_id` kept);
a message the proxy made (a summary, a recall) a user text block. Then the API's rules:
blocks of consecutive messages of one role are merged into one message (a user message's
`tool_result` blocks first), an assistant message that began with its thinking still does,
and the first message is a user message.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Any

from proxy.anthropic.read import SILENT_BLOCKS, Converted
from proxy.items.read import MARK, PART_MARK

TRIMMED_OPENING = "(The start of this conversation was trimmed to fit the context window.)"


def to_messages(body: dict[str, Any], conv: Converted, planned: list[Any]) -> dict[str, Any]:
    """`body` with `system` and `messages` as the planned chat messages say."""
    given: list[Any] = body.get("messages") or []
    system: Any = body.get("system")
    slots: dict[int, list[tuple[int, Any]]] = {}  # a client message's kept (index, block)s
    same_whole: set[int] = set()  # client messages kept whole and unchanged
    made: dict[int, list[Any]] = {}  # the proxy's own messages, after the slot they follow
    last = -1
    for m in planned:
        k = m.get(MARK) if isinstance(m, dict) else None
        if not isinstance(k, int) or not 0 <= k < len(conv.sources):
            made.setdefault(last, []).append({"type": "text", "text": _text_of(m.get("content"))})
            continue
        source, same = conv.sources[k], m is conv.messages[k]
        if source.kind == "system":
            system = system if same else _edited_system(system, m.get("content"))
            continue
        last = source.message
        content = given[last].get("content")
        kept = slots.setdefault(last, [])
        if source.blocks is None:
            if same:
                same_whole.add(last)
            text = content if same and isinstance(content, str) else _text_of(m.get("content"))
            kept.append((0, {"type": "text", "text": text}))
        elif source.kind == "result":
            j = source.blocks[0]
            block = content[j] if same else {**content[j], "content": _text_of(m.get("content"))}
            kept.append((j, block))
        elif same:
            kept += ((j, content[j]) for j in source.blocks)
        else:
            kept += _edited_blocks(content, source.blocks, m.get("content"))
    moved = _moved_breakpoints(given, slots)
    turns: list[Turn] = [Turn("user", made[-1])] if -1 in made else []
    for i in sorted(slots):
        original = given[i]
        pairs = sorted(slots[i], key=lambda pair: pair[0])
        blocks = [
            {**block, "cache_control": moved[(i, j)]} if (i, j) in moved else block
            for j, block in pairs
        ]
        content = original.get("content")
        whole = (i in same_whole and (i, 0) not in moved) or (
            isinstance(content, list) and len(blocks) == len(content)
            and all(a is b for a, b in zip(blocks, content, strict=True))
        )  # fmt: skip
        role = "assistant" if original.get("role") == "assistant" else "user"
        if role == "assistant" and not whole:
            blocks = _thinking_first(content, blocks)
        turns.append(Turn(role, blocks, original if whole else None))
        if i in made:
            turns.append(Turn("user", made[i]))
    out = dict(body)  # the body's keys in their order, two of them replaced
    if system is not None:
        out["system"] = system
    out["messages"] = _alternating(turns, given)
    return out


def _moved_breakpoints(
    given: list[Any], slots: dict[int, list[tuple[int, Any]]]
) -> dict[tuple[int, int], Any]:
    """Where the client's cache points on blocks that were left out go: on the last kept
    block before each (the end of what is still the prompt's prefix there), unless it has
    one; (message, block) -> the cache_control. No more points than the client set."""
    present = {(i, j) for i, pairs in slots.items() for j, _ in pairs}
    # A thinking block takes no cache point: the one before it does.
    kept = sorted((i, j) for i, pairs in slots.items() for j, b in pairs if not _is_thinking(b))
    marked = {(i, j) for i, pairs in slots.items() for j, b in pairs if _cache_point(b) is not None}
    out: dict[tuple[int, int], Any] = {}
    for i, message in enumerate(given):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else ()):
            point = _cache_point(block)
            if point is None or (i, j) in present:
                continue
            at = bisect_left(kept, (i, j)) - 1
            if at >= 0 and kept[at] not in marked and kept[at] not in out:
                out[kept[at]] = point
    return out


def _cache_point(block: Any) -> Any:
    return block.get("cache_control") if isinstance(block, dict) else None


@dataclass(slots=True)
class Turn:
    """A message to write: its role, its blocks, and the client's message when it is that
    message whole and unchanged (then written as it came)."""

    role: str
    blocks: list[Any]
    original: dict[str, Any] | None = None


def _alternating(turns: list[Turn], given: list[Any]) -> list[Any]:
    merged: list[Turn] = []
    for turn in turns:
        if merged and merged[-1].role == turn.role:
            last = merged[-1]
            blocks = [*last.blocks, *turn.blocks]
            if turn.role == "user":  # tool results come first in a user message
                blocks.sort(key=_not_a_result)
            merged[-1] = Turn(turn.role, blocks)
        else:
            merged.append(turn)
    first_given = given[0].get("role") if given and isinstance(given[0], dict) else None
    if merged and merged[0].role != "user" and first_given == "user":
        merged.insert(0, Turn("user", [{"type": "text", "text": TRIMMED_OPENING}]))
    out: list[Any] = []
    for turn in merged:
        if turn.original is not None:  # as it came, but for its x_context tag
            out.append({k: v for k, v in turn.original.items() if k != "x_context"})
        else:
            out.append({"role": turn.role, "content": turn.blocks})
    return out


def _edited_system(system: Any, planned: Any) -> Any:
    if isinstance(system, str) or not isinstance(system, list):
        return planned if isinstance(planned, str) else _text_of(planned)
    return [block for _, block in _edited_blocks(system, list(range(len(system))), planned)]


def _edited_blocks(content: list[Any], chosen: list[int], planned: Any) -> list[tuple[int, Any]]:
    """The chosen blocks, by index, with the planner's new text; other blocks (tool_use,
    thinking, images) as they came."""
    texts: dict[int, str] = {}
    if isinstance(planned, str):
        first = next((j for j in chosen if _is_text(content[j])), None)
        if first is not None:
            texts[first] = planned
    elif isinstance(planned, list):
        for p in planned:
            j = p.get(PART_MARK) if isinstance(p, dict) else None
            if isinstance(j, int) and _is_text(content[j]) and isinstance(p.get("text"), str):
                texts[j] = p["text"]
        kept = {p.get(PART_MARK) for p in planned if isinstance(p, dict)}
        chosen = [j for j in chosen if j in kept or not _is_text(content[j])]
    out: list[tuple[int, Any]] = []
    for j in chosen:
        block = content[j]
        if j in texts and texts[j] != block.get("text"):
            block = {**block, "text": texts[j]}
            block.pop("citations", None)  # they point into the old text
        out.append((j, block))
    return out


def _thinking_first(content: Any, blocks: list[Any]) -> list[Any]:
    """An assistant message that began with its thinking begins with it still, whatever
    of it was dropped: with extended thinking on, the API refuses one that starts with a
    `tool_use` ("Expected `thinking` or `redacted_thinking`"). The blocks are the signed
    ones that came in, unchanged; the API counts no earlier turn's thinking."""
    if not isinstance(content, list):
        return blocks
    leading = []
    for block in content:
        if not (isinstance(block, dict) and block.get("type") in SILENT_BLOCKS):
            break
        leading.append(block)
    if not leading or (blocks and _is_thinking(blocks[0])):
        return blocks
    return [*leading, *(b for b in blocks if not any(b is t for t in leading))]


def _is_thinking(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") in SILENT_BLOCKS


def _not_a_result(block: Any) -> bool:
    return not (isinstance(block, dict) and block.get("type") == "tool_result")


def _is_text(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "text"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts = [p.get("text") for p in content or () if isinstance(p, dict)]
    return "".join(t for t in texts if isinstance(t, str))
