"""Trim: apply the planner's decisions to the messages -> the forwarded messages.

Pure. A kept message whose items are all kept is forwarded as it came (tags removed); a
message loses only what was decided about its items; summaries go where their cluster was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.planner.items import Action, Decision, Layout, MessageLayout

_EXTRAS = ("tool_calls", "function_call")  # what a message keeps only with its own text


def part_texts(ml: MessageLayout, replace: Mapping[int, str | None]) -> dict[int | None, str]:
    """Each part's text after `replace` (item key -> new text, None = removed).

    An item spread over several pieces (text around blocks) takes its new text piece by
    piece: whole pieces while the new text still starts with them, the rest in the next.
    """
    pending = {k: v for k, v in replace.items() if v is not None}
    last: dict[int, tuple[int, int]] = {}
    for p, part in enumerate(ml.parts):
        for q, (key, _) in enumerate(part.pieces):
            last[key] = (p, q)
    out: dict[int | None, str] = {}
    for p, part in enumerate(ml.parts):
        chunks: list[str] = []
        for q, (key, text) in enumerate(part.pieces):
            if key not in replace:
                chunks.append(text)
                continue
            new = pending.get(key)
            if new is None:
                continue
            if last[key] != (p, q) and new.startswith(text):
                chunks.append(text)
                pending[key] = new[len(text) :]
            else:
                chunks.append(new)
                del pending[key]
        out[part.index] = "".join(chunks)
    return out


def render(ml: MessageLayout, replace: Mapping[int, str | None], *, bare: bool = False) -> Any:
    """The message with `replace` applied; `bare` also drops what belongs to its own text
    (images, tool calls) because only blocks of it are kept."""
    if not replace and not bare:
        return ml.stripped
    texts = part_texts(ml, replace)
    out: dict[str, Any] = dict(ml.stripped)
    content = ml.stripped.get("content")
    if isinstance(content, str):
        out["content"] = texts.get(None, content)
    elif isinstance(content, list):
        parts: list[Any] = []
        for p, part in enumerate(content):
            if p in texts:
                if texts[p] or not part.get("text"):
                    parts.append({**part, "text": texts[p]})
            elif not bare:
                parts.append(part)
        out["content"] = parts if parts or not content else ""
    if bare:
        for key in _EXTRAS:
            out.pop(key, None)
    return out


def apply(layout: Layout, decisions: Mapping[int, Decision]) -> list[Any]:
    """The forwarded messages, in the original order, summaries at their anchors."""
    placed: dict[int, list[Any]] = {}
    moved: set[int] = set()
    inserted = Action.SUMMARY_INSERTED
    for key, d in decisions.items():
        if d.action is inserted and d.anchor is not None:
            if key in layout.extra:
                message = layout.extra[key]
            else:
                ml = layout.message(layout.msg[key])
                message = render(ml, _replacements(ml.items, decisions))
                moved.add(ml.index)
            placed.setdefault(d.anchor, []).append(message)
    keep = Action.KEEP
    stripped, split = layout.stripped, layout.split
    out: list[Any] = []
    if not placed and not split:  # every message one item: the loop below, lean
        get = decisions.get
        for i, (m, b) in enumerate(zip(stripped, layout.base, strict=True)):
            base = get(b)
            if base is None or (base.action is keep and base.text is None):
                out.append(m)
            elif not base.kept:
                continue
            elif base.text is not None and type(m.get("content")) is str:
                out.append({**m, "content": base.text})  # what render makes of a cut text
            else:
                out.append(render(layout.message(i), _replacements([b], decisions)))
        return out
    for i, b in enumerate(layout.base):
        if placed:
            out.extend(placed.pop(i, ()))
        if moved and i in moved:
            continue
        base = decisions.get(b)
        s = split.get(i) if split else None
        alone = s is None or len(s.items) == 1
        if alone and (base is None or (base.action is keep and base.text is None)):
            out.append(stripped[i])  # the common case: a whole message kept as it came
            continue
        if (
            base is not None
            and not base.kept
            and (alone or layout.group(i) or not _any_kept(layout.items_of(i), decisions))
        ):
            continue  # alone: its only item is the base, and that is not kept
        ml = layout.message(i)
        out.append(
            render(ml, _replacements(ml.items, decisions), bare=base is not None and not base.kept)
        )
    for rest in placed.values():  # anchors past the end cannot happen; kept for safety
        out.extend(rest)
    return out


def _any_kept(keys: list[int], decisions: Mapping[int, Decision]) -> bool:
    return any(decisions[k].kept if k in decisions else True for k in keys)


def _replacements(keys: list[int], decisions: Mapping[int, Decision]) -> dict[int, str | None]:
    out: dict[int, str | None] = {}
    for key in keys:
        d = decisions.get(key)
        if d is None:
            continue
        if not d.kept:
            out[key] = None
        elif d.text is not None:
            out[key] = d.text
    return out


def with_note(messages: list[Any], note: str) -> list[Any]:
    """`note` appended to the first system/developer message (a new one first if none)."""
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("system", "developer"):
            continue
        content = message.get("content")
        if isinstance(content, str):
            updated = {**message, "content": f"{content}\n\n{note}" if content else note}
        elif isinstance(content, list):
            updated = {**message, "content": [*content, {"type": "text", "text": note}]}
        else:
            continue
        return [*messages[:i], updated, *messages[i + 1 :]]
    return [{"role": "system", "content": note}, *messages]
