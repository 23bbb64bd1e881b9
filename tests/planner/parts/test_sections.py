"""Tests for tagging: x_context, inline <context> blocks, heading rules, defaults, groups."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.planner.parts.groups import shape
from proxy.planner.parts.items import Kind
from proxy.planner.parts.sections import build_layout
from proxy.planner.parts.tags import Block, split_blocks, split_headings
from proxy.policy.model import HistoryPolicy, Policy, TagsPolicy
from proxy.types import Priority, Section

POLICY = Policy()
INLINE = Policy(tags=TagsPolicy(inline_in_user=True))  # inline tags read in user messages


def user(text: Any, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def assistant(text: Any, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}


def call(*ids: str) -> dict[str, Any]:
    calls = [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def result(call_id: str, text: str = "out") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def tags(messages: list[Any], policy: Policy = POLICY) -> list[tuple[int, str, str, str, str]]:
    layout = build_layout(messages, policy)
    return [
        (it.msg, it.kind.value, it.section.value, it.priority.value, it.text) for it in layout.items
    ]


# --- inline blocks -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "blocks", "problems"),
    [
        ("plain text", 0, 0),
        ('a <context section="memory">m</context> b', 1, 0),
        ("<context>x</context><context>y</context>", 2, 0),
        ("a lone <context> here", 0, 1),
        ("a lone </context> here", 0, 0),
        ("<context>open <context>inner</context> tail", 1, 1),
        ("<contextual>not a tag</contextual>", 0, 0),
        ("<context/> self closing", 0, 0),
        ("<context section='memory' id=abc>single quotes</context>", 1, 0),
        ('<context section="memory" ???>x</context>', 1, 0),
    ],
)
def test_split_blocks(text: str, blocks: int, problems: int) -> None:
    pieces, found = split_blocks(text)
    assert sum(isinstance(p, Block) for p in pieces) == blocks
    assert len(found) == problems
    # Removing tags only: the outside and inner texts, in order, are the original minus tags.
    rebuilt = "".join(p.inner if isinstance(p, Block) else p for p in pieces)
    if blocks == 0:
        assert rebuilt == text


def test_block_attributes_and_bad_attribute_text() -> None:
    pieces, _ = split_blocks('<context section="memory" id=abc score="0.5" ???>x</context>')
    block = next(p for p in pieces if isinstance(p, Block))
    assert block.attrs == {"section": "memory", "id": "abc", "score": "0.5"}
    assert block.problems  # the unreadable ??? is reported


# --- headings ------------------------------------------------------------------------


def test_split_headings_known_unknown_nested_and_fenced() -> None:
    text = (
        "You are a bot.\n"
        "## Memory\n- likes tea\n### Details\n- more\n"
        "## Rules\nbe nice\n"
        "```\n## Memory\n```\n"
        "# Conversation Summary:\nwe talked\n"
    )
    pieces = split_headings(text, POLICY.headings)
    assert "".join(t for _, t in pieces) == text
    assert [s for s, _ in pieces] == [None, Section.MEMORY, None, Section.CONVERSATION_SUMMARY]
    assert "### Details" in pieces[1][1]  # a deeper unknown heading stays inside
    assert "```\n## Memory" in pieces[2][1]  # inside a fence it is text


def test_headings_only_in_system_messages() -> None:
    msgs = [
        {"role": "system", "content": "Base.\n## Memory\nfact\n"},
        user("## Memory\nnot a section in a user message"),
        user("now"),
    ]
    rows = tags(msgs)
    assert (0, "heading", "memory", "high", "## Memory\nfact\n") in rows
    assert rows[0][:4] == (0, "message", "system_prompt", "required")
    assert all(r[1] != "heading" for r in rows if r[0] == 1)


# --- defaults ------------------------------------------------------------------------


def test_defaults_by_position() -> None:
    msgs: list[Any] = [{"role": "system", "content": "s"}]
    for t in range(5):
        msgs += [user(f"q{t}"), assistant(f"a{t}")]
    msgs += [user("now"), assistant("partial")]
    policy = Policy(history=HistoryPolicy(keep_recent=2))
    rows = tags(msgs, policy)
    by_msg = {r[0]: r for r in rows}
    assert by_msg[0][2:4] == ("system_prompt", "required")
    assert by_msg[1][2:4] == ("goal", "required")  # the setup: before the first answer
    assert by_msg[2][2:4] == ("recent_messages", "low")  # turn 1 of 5 earlier turns
    assert by_msg[3][2:4] == (
        "recent_messages",
        "low",
    )  # turn 2    assert by_msg[6][2:4] == ("recent_messages", "low")  # turn 3
    assert by_msg[7][2:4] == ("recent_messages", "high")  # turn 4: newest two
    assert by_msg[10][2:4] == ("recent_messages", "high")
    assert by_msg[11][2:4] == ("recent_messages", "required")  # the current turn
    assert by_msg[12][2:4] == ("recent_messages", "required")  # what follows it


def test_no_user_message_makes_the_last_unit_current() -> None:
    layout = build_layout([assistant("a"), call("x"), result("x")], POLICY)
    assert layout.current_start == 1
    assert [it.required for it in layout.items] == [False, True, True]


# --- x_context -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "section", "priority", "problems"),
    [
        ({"section": "memory"}, "memory", "high", 0),
        ({"section": "retrieved_context", "score": 0.3}, "retrieved_context", "medium", 0),
        ({"section": "memory", "priority": "low"}, "memory", "low", 0),
        ({"priority": "medium"}, "recent_messages", "medium", 0),
        ({"section": "nope"}, "recent_messages", "low", 1),
        ({"priority": "urgent"}, "recent_messages", "low", 1),
        ({"score": "high"}, "recent_messages", "low", 1),
        ({"summary_of": "c1"}, "conversation_summary", "medium", 0),
        ({"summary_of": 5}, "recent_messages", "low", 1),
        ("not an object", "recent_messages", "low", 1),
        ({"id": ["x"]}, "recent_messages", "low", 1),
    ],
)
def test_x_context(x: Any, section: str, priority: str, problems: int) -> None:
    msgs = [assistant("hi"), user("old", x_context=x), assistant("a"), user("q2"), assistant("a2")]
    msgs += [user(f"pad {i}") for i in range(8)] + [user("now")]
    layout = build_layout(msgs, Policy(history=HistoryPolicy(keep_recent=1)))
    it = layout.items[1]
    assert (it.section.value, it.priority.value) == (section, priority)
    assert len(layout.problems) == problems
    assert "x_context" not in layout.messages[1].stripped
    assert layout.tagged


def test_current_turn_stays_required_whatever_the_tag() -> None:
    """The last user message stays required whatever its tag; a system message's tag means
    what it says: memory at the priority the tag names."""
    msgs = [
        {"role": "system", "content": "s", "x_context": {"section": "memory", "priority": "low"}},
        user("now", x_context={"priority": "low"}),
    ]
    rows = tags(msgs)
    assert rows[0][2:4] == ("memory", "low")
    assert rows[1][3] == "required"


# --- inline blocks in messages --------------------------------------------------------


def test_blocks_in_string_and_text_parts() -> None:
    msgs = [
        user('See <context section="retrieved_context" id="d1" score="0.9">doc one</context> ok'),
        user(
            [
                {"type": "text", "text": 'x <context section="memory">fact</context>'},
                {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
            ]
        ),
        user("now"),
    ]
    layout = build_layout(msgs, INLINE)
    kinds = [(it.msg, it.kind, it.section) for it in layout.items]
    assert (0, Kind.BLOCK, Section.RETRIEVED_CONTEXT) in kinds
    assert (1, Kind.BLOCK, Section.MEMORY) in kinds
    assert layout.messages[0].stripped["content"] == "See doc one ok"
    assert layout.messages[1].stripped["content"][0]["text"] == "x fact"
    assert layout.messages[1].stripped["content"][1]["type"] == "image_url"
    block = next(it for it in layout.items if it.kind is Kind.BLOCK and it.msg == 0)
    assert (block.id, block.score) == ("d1", 0.9)


def test_block_without_attributes_inherits_the_message() -> None:
    msgs = [user("<context>x</context> y"), user("now <context>ctx</context>")]
    layout = build_layout(msgs, INLINE)
    blocks = [it for it in layout.items if it.kind is Kind.BLOCK]
    assert blocks[0].priority is layout.items[layout.messages[0].base].priority
    assert blocks[1].priority is Priority.REQUIRED  # inside the current turn


def test_malformed_tags_are_text_and_reported() -> None:
    text = 'a <context section="memory"> never closed'
    layout = build_layout(
        [user(text), user('b <context section="bogus" priority="x">y</context>')], INLINE
    )
    assert layout.messages[0].stripped["content"] == text
    assert any("unclosed" in p for p in layout.problems)
    assert any("unknown section" in p for p in layout.problems)
    assert any("bad priority" in p for p in layout.problems)


# --- groups and odd shapes -----------------------------------------------------------


def test_tool_groups_share_one_unit_and_tag() -> None:
    msgs = [
        user("q"),
        call("a", "b"),
        result("a"),
        # A tool result's x_context is the outside world's: dropped, not read.
        {**result("b"), "x_context": {"section": "retrieved_context", "priority": "required"}},
        result("zzz"),  # no call anywhere: a unit of its own
        user("now"),
        assistant("partial"),
    ]
    sh = shape(msgs)
    assert sh.unit_of[1] == sh.unit_of[2] == sh.unit_of[3]
    assert sh.unit_of[4] != sh.unit_of[1]
    layout = build_layout(msgs, POLICY)
    bases = [layout.items[layout.messages[i].base] for i in (1, 2, 3)]
    assert {b.section for b in bases} == {Section.RECENT_MESSAGES}
    assert len({b.priority for b in bases}) == 1 and not bases[0].required
    assert "x_context" not in layout.messages[3].stripped
    assert any("x_context in a tool message is not read" in p for p in layout.problems)


def test_group_reaching_into_the_current_turn_is_current() -> None:
    msgs = [user("q"), call("a"), user("now"), result("a")]
    layout = build_layout(msgs, POLICY)
    assert layout.current_start == 1
    assert all(it.required for it in layout.items if it.msg >= 1)


@pytest.mark.parametrize(
    "odd",
    [
        None,
        5,
        "text",
        ["list"],
        {"role": "user", "content": 7},
        {"role": 3, "content": {"a": 1}},
        {"role": "assistant", "tool_calls": "nope"},
        {"content": "no role"},
    ],
)
def test_odd_shapes_are_opaque_and_required(odd: Any) -> None:
    layout = build_layout([user("q"), odd, user("now")], POLICY)
    item = layout.items[layout.messages[1].base]
    if item.kind is Kind.OPAQUE:
        assert item.required
        assert layout.problems
    else:  # a dict without a role is still a message we understand
        assert odd == {"content": "no role"}
