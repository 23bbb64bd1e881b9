"""Tests for trim: decisions applied to messages, pieces, summaries placed, the note."""

from __future__ import annotations

from typing import Any

from proxy.planner.budget.trim import apply, with_note
from proxy.planner.parts.decision import MARKER, Action, Decision
from proxy.planner.parts.messages import part_texts, render
from proxy.planner.parts.sections import build_layout
from proxy.policy.model import Policy, TagsPolicy

KEEP = Decision(Action.KEEP, "")
DROP = Decision(Action.DROP, "")


def layout_of(messages: list[Any]) -> Any:
    """Inline tags read in user messages too: trim puts any message's pieces together."""
    return build_layout(messages, Policy(tags=TagsPolicy(inline_in_user=True)))


def test_untouched_message_is_the_same_object() -> None:
    msgs = [{"role": "user", "content": "hi"}, {"role": "user", "content": "now"}]
    layout = layout_of(msgs)
    out = apply(layout, {it.key: KEEP for it in layout.items})
    assert out[0] is msgs[0] and out[1] is msgs[1]


def test_x_context_removed_rest_unchanged() -> None:
    msg = {"role": "user", "content": "hi", "name": "bob", "x_context": {"section": "memory"}}
    layout = layout_of([msg, {"role": "user", "content": "now"}])
    out = apply(layout, {it.key: KEEP for it in layout.items})
    assert out[0] == {"role": "user", "content": "hi", "name": "bob"}
    assert "x_context" in msg  # the request is never mutated


def test_dropped_block_leaves_the_outside_text() -> None:
    msgs = [
        {"role": "user", "content": 'a <context id="1">B</context> c <context>D</context>'},
        {"role": "user", "content": "now"},
    ]
    layout = layout_of(msgs)
    ml = layout.messages[0]
    b1, b2 = ml.items[1], ml.items[2]
    assert render(ml, {b1: None})["content"] == "a  c D"
    assert render(ml, {b2: "D2"})["content"] == "a B c D2"


def test_truncated_text_spread_over_pieces() -> None:
    msgs = [
        {"role": "user", "content": "one two <context>X</context> three four"},
        {"role": "user", "content": "now"},
    ]
    layout = layout_of(msgs)
    ml = layout.messages[0]
    base = ml.base
    # the base item's text is "one two  three four"; cut after "one two  thr"
    texts = part_texts(ml, {base: "one two  thr" + MARKER})
    assert texts[None] == "one two X thr" + MARKER
    texts = part_texts(ml, {base: "one" + MARKER})
    assert texts[None] == "one" + MARKER + "X"


def test_text_parts_emptied_are_removed_images_kept() -> None:
    content = [
        {"type": "text", "text": "<context>only a block</context>"},
        {"type": "image_url", "image_url": {"url": "u"}},
        {"type": "text", "text": "tail"},
    ]
    layout = layout_of([{"role": "user", "content": content}, {"role": "user", "content": "now"}])
    ml = layout.messages[0]
    out = render(ml, {ml.items[1]: None})
    assert out["content"] == [content[1], content[2]]
    bare = render(ml, {ml.base: None}, bare=True)  # only the block kept: no image, no tail
    assert bare["content"] == [{"type": "text", "text": "only a block"}]


def test_group_dropped_whole_and_base_drop_keeps_blocks_of_plain_messages() -> None:
    msgs = [
        {"role": "user", "content": "q <context section='memory'>fact</context>"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "r <context>inner</context>"},
        {"role": "user", "content": "now"},
    ]
    layout = layout_of(msgs)
    decisions = {it.key: KEEP for it in layout.items}
    decisions[layout.messages[0].base] = DROP
    for i in (1, 2):
        decisions[layout.messages[i].base] = DROP
    out = apply(layout, decisions)
    assert out == [{"role": "user", "content": "fact"}, msgs[3]]


def test_summary_moves_to_its_anchor() -> None:
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "sum", "x_context": {"summary_of": "c"}},
        {"role": "user", "content": "now"},
    ]
    layout = layout_of(msgs)
    decisions = {it.key: KEEP for it in layout.items}
    decisions[0] = DROP
    decisions[1] = DROP
    decisions[2] = Decision(Action.SUMMARY_INSERTED, "", anchor=0)
    out = apply(layout, decisions)
    assert [m["content"] for m in out] == ["sum", "now"]
    decisions[0] = KEEP
    decisions[2] = Decision(Action.SUMMARY_INSERTED, "", anchor=1)
    assert [m["content"] for m in apply(layout, decisions)] == ["a", "sum", "now"]


def test_with_note() -> None:
    sys_msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "u"}]
    assert with_note(sys_msgs, "N")[0]["content"] == "S\n\nN"
    assert sys_msgs[0]["content"] == "S"
    parts = [{"role": "developer", "content": [{"type": "text", "text": "S"}]}]
    assert with_note(parts, "N")[0]["content"][-1] == {"type": "text", "text": "N"}
    assert with_note([{"role": "user", "content": "u"}], "N")[0] == {
        "role": "system",
        "content": "N",
    }
