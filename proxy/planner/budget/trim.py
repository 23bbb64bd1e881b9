"""Trim: apply the planner's decisions to the messages -> the forwarded messages.

Pure. A kept message whose items are all kept is forwarded as it came (tags removed); a
message loses only what was decided about its items; summaries go where their cluster was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.planner.budget.placeholders import turns_placeholder
from proxy.planner.parts import STRETCH, Action, Decision, Layout, Turn, render


def omitted(
    layout: Layout, decisions: Mapping[int, Decision], turns: Sequence[Turn]
) -> dict[int, Any]:
    """A marker for each stretch of turns dropped whole, by the message it goes before
    (where the stretch began): its text depends only on how many turns it stands for, so
    the forwarded prompt is the same while the same turns are gone."""
    marks: dict[int, Any] = {}
    base = layout.base
    start, run = -1, 0
    for turn in (*turns, None):
        gone = (
            turn is not None
            and bool(turn.question)
            and not any((d := decisions.get(base[i])) is None or d.kept for i in turn.question)
        )
        if gone:
            assert turn is not None
            if not run:
                start = turn.start
            run += 1
            continue
        if run:
            recall = layout.recall_id(STRETCH, start)
            marks[start] = {"role": "user", "content": turns_placeholder(run, recall)}
        run = 0
    return marks


def apply(
    layout: Layout, decisions: Mapping[int, Decision], turns: Sequence[Turn] = ()
) -> list[Any]:
    """The forwarded messages, in the original order, summaries at their anchors, a
    marker where a stretch of turns was dropped."""
    marks = omitted(layout, decisions, turns) if turns else {}
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
            if marks and i in marks:
                out.append(marks[i])
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
        if marks and i in marks:
            out.append(marks[i])
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
