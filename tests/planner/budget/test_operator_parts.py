"""The operator's parts outrank the history: a block the operator tagged in a system or
developer message, at any priority above low, is kept before any turn outside the current
one; the previous turn is cut before such a block is dropped."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from proxy.planner.request import plan_request
from proxy.policy.model import (
    DEFAULT_SECTIONS,
    BudgetPolicy,
    CachePolicy,
    HistoryPolicy,
    ModelPolicy,
    Policy,
)
from proxy.tokens import TokenCounter
from proxy.types import Overflow, Priority, Section
from tests.planner.test_planning import assistant, body_of, user, words
from tests.planner.test_turn_properties import VOCAB, Chat, chats
from tests.planner_fakes import WordTokenizer

WORDS = WordTokenizer()
MEMORY = "User plan: Gold tier. Never grant refunds over $500."
SYSTEM = (
    f'You are a travel assistant.\n<context section="memory" priority="high">{MEMORY}</context>'
    "\nBe concise."
)


def _travel_chat(page_words: int) -> list[dict[str, Any]]:
    """A system prompt holding a memory block, six turns, and a fetched page in the current
    turn (the shape of a browsing assistant's request)."""
    rng = random.Random(1)
    vocab = ["alpha", "beta", "gamma", "delta", "flight", "booking", "refund", "seat", "upgrade", "baggage", "invoice"]

    def para(n: int) -> str:
        return " ".join(rng.choice(vocab) for _ in range(n))

    msgs: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for i in range(6):
        msgs += [user(f"Question {i}: " + para(60)), assistant(f"Answer {i}: " + para(400))]
    page = "Here is the page I fetched:\n" + para(page_words) + "\nWhat does it say about refunds?"
    return [*msgs, user(page)]


def _system_text(body: dict[str, Any]) -> str:
    return "".join(str(m.get("content")) for m in body["messages"] if m["role"] in ("system", "developer"))


def test_a_memory_block_in_the_system_prompt_is_kept_before_the_previous_turn() -> None:
    # A 4,000-token window, a fetched page growing in the current turn: the 13-token block
    # was dropped "over budget" while the previous turn was pinned and budget was left over.
    policy = Policy(models={"gpt-4o-mini": ModelPolicy(context_window=4000)})
    tokenizer = TokenCounter().for_model("gpt-4o-mini", policy)
    for page in range(2500, 3401, 50):
        messages = _travel_chat(page)
        out = plan_request(body_of(messages, model="gpt-4o-mini"), policy, tokenizer, 4000)
        assert out.trimmed
        assert MEMORY in _system_text(out.body), page
        sent = out.body["messages"]
        # The previous turn is still there (its reply cut), after the block.
        assert messages[-3] in sent, page
        assert any(str(m.get("content")).startswith("Answer 5: ") for m in sent), page
        assert out.tokens_after <= 4000 - 16, page


def test_a_medium_retrieved_block_outranks_older_and_newest_turns() -> None:
    retrieved = "doc " + words(300, "d")
    system = f'Rules.<context section="retrieved_context" priority="medium">{retrieved}</context>'
    msgs: list[dict[str, Any]] = [{"role": "developer", "content": system}, assistant("Hi.")]
    for t in range(10):
        msgs += [user(f"q{t} " + words(20, f"q{t}_")), assistant(f"a{t} " + words(150, f"a{t}_"))]
    msgs.append(user("now"))
    out = plan_request(body_of(msgs), Policy(cache=CachePolicy(enabled=False)), WORDS, 900)
    assert retrieved in _system_text(out.body)
    assert out.tokens_after is not None and out.tokens_after <= out.budget  # type: ignore[operator]
    sent = out.body["messages"]
    assert msgs[-3] in sent  # the previous question


def test_a_block_the_budget_cannot_hold_goes_in_the_window_when_the_previous_turn_does() -> None:
    # The required parts alone nearly fill the budget: the previous turn is kept past it
    # (whatever the room), and the operator's block comes before it in the window.
    block = "memo " + words(40, "m")
    system = f'S.<context section="working_state" priority="high">{block}</context>'
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system}, assistant("Hello.")]
    for t in range(3):
        msgs += [user(f"q{t} " + words(10, f"q{t}_")), assistant(f"a{t} " + words(200, f"a{t}_"))]
    msgs.append(user("page " + words(760, "p")))
    dropping = replace(DEFAULT_SECTIONS[Section.WORKING_STATE], overflow=Overflow.DROP)
    sections = {**DEFAULT_SECTIONS, Section.WORKING_STATE: dropping}
    policy = Policy(cache=CachePolicy(enabled=False), sections=sections)
    out = plan_request(body_of(msgs), policy, WORDS, 1000)
    sent = out.body["messages"]
    assert block in _system_text(out.body)
    assert msgs[-3] in sent  # the previous question
    assert out.tokens_after is not None and out.budget is not None
    assert out.budget < out.tokens_after <= 1000 - 16


def test_a_low_block_still_gives_way_to_the_history() -> None:
    low = "aside " + words(60, "l")
    system = f'S.<context section="scaffolding_reminder" priority="low">{low}</context>'
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system}, assistant("Hi.")]
    for t in range(6):
        msgs += [user(f"q{t} " + words(10, f"q{t}_")), assistant(f"a{t} " + words(120, f"a{t}_"))]
    msgs.append(user("now"))
    out = plan_request(body_of(msgs), Policy(cache=CachePolicy(enabled=False)), WORDS, 600)
    assert low not in _system_text(out.body)  # low: below the history
    assert msgs[-3] in out.body["messages"] and msgs[-2] in out.body["messages"]


def test_a_client_summary_in_a_system_message_keeps_its_own_rules() -> None:
    # A summary standing in for a cluster of turns only takes what is left once every other
    # choice had its turn (clusters.py): it is not pinned ahead of the turns.
    summary = "summary " + words(200, "s")
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "S."}, assistant("Hi.")]
    msgs.append(
        {"role": "system", "content": summary,
         "x_context": {"section": "conversation_summary", "summary_of": "c1"}}
    )  # fmt: skip
    for t in range(2):
        msgs += [user(f"q{t} " + words(10, f"q{t}_"), x_context={"cluster": "c1"}),
                 assistant(f"a{t} " + words(40, f"a{t}_"))]  # fmt: skip
    for t in range(2, 8):
        msgs += [user(f"q{t} " + words(10, f"q{t}_")), assistant(f"a{t} " + words(120, f"a{t}_"))]
    msgs.append(user("now"))
    out = plan_request(body_of(msgs), Policy(cache=CachePolicy(enabled=False)), WORDS, 700)
    sent = out.body["messages"]
    assert out.trimmed and msgs[-3] in sent and msgs[-2] in sent
    assert not any(str(m.get("content")) == summary for m in sent)


SECTIONS = [Section.MEMORY, Section.WORKING_STATE, Section.RETRIEVED_CONTEXT]


@st.composite
def operator_blocks(draw: st.DrawFn) -> list[tuple[str, Section, Priority]]:
    out = []
    for b in range(draw(st.integers(1, 3))):
        size = draw(st.integers(2, 30))
        text = f"blk{b} " + " ".join(f"b{b}w{i}" for i in range(size))
        out.append((text, draw(st.sampled_from(SECTIONS)), draw(st.sampled_from(
            [Priority.HIGH, Priority.MEDIUM]))))  # fmt: skip
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chats(),
    operator_blocks(),
    st.sampled_from(["system", "developer"]),
    st.builds(
        lambda relevance, keep, cache: Policy(
            history=HistoryPolicy(keep_recent=keep, relevance=relevance),
            cache=CachePolicy(enabled=cache),
            budget=BudgetPolicy(on_required_overflow="truncate"),
        ),
        st.sampled_from(["bm25", "off"]),
        st.integers(0, 6),
        st.booleans(),
    ),
    st.integers(300, 4000),
)
def test_no_turn_outside_the_current_one_is_kept_while_an_operator_block_is_dropped(
    chat: Chat, blocks: list[tuple[str, Section, Priority]], role: str, policy: Policy, window: int
) -> None:
    tagged = "".join(
        f'<context section="{s.value}" priority="{p.value}">{text}</context>'
        for text, s, p in blocks
    )
    operator = {"role": role, "content": "Operator rules. " + tagged}
    messages = [operator, *chat.messages]
    setup, current = chat.setup + 1, chat.current + 1
    # Only where the budget holds what is required and the blocks: the rule orders the
    # room the required parts leave, it does not make room that is not there.
    required = sum(WORDS.count_message(m) for m in messages[:setup] + messages[current:])
    assume(required + WORDS.count_text(tagged) + 30 <= window * 0.8)
    out = plan_request(body_of(messages), policy, WORDS, window)
    if not out.trimmed:
        return
    system = _system_text(out.body)
    # The turns after the opening (what answered the setup is the setup's) and before the
    # current one.
    start = next((i for i in range(setup, current) if messages[i]["role"] == "user"), current)
    history = {f"m{i - 1}" for i in range(start, current)}
    kept_history = [m for m in out.body["messages"] if m.get("name") in history]
    for text, _, _ in blocks:
        head = text.split()[0]
        if head not in system:
            assert not kept_history, (head, [m.get("name") for m in kept_history])


def test_required_parts_a_token_over_the_budget_go_alone_not_cut_to_nothing() -> None:
    # The required parts (an agent loop's current turn, the previous turn cut, the operator's
    # block) and the marks of what was left out come to a token over the budget: they go
    # alone, within the window. The fit loop used to tighten past them in steps doubling
    # each time, until `truncate` cut every required part to its marker (hypothesis found it).
    def exchange(i: int, result: str) -> list[dict[str, Any]]:
        call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "alpha"}}
        made = {"role": "assistant", "content": None, "tool_calls": [call]}
        return [made, {"role": "tool", "tool_call_id": f"c{i}", "content": result}]

    def text(n: int, stride: int) -> str:
        return " ".join(VOCAB[(i * stride) % 9] for i in range(n))

    msgs: list[dict[str, Any]] = [user("task alpha"), *exchange(0, "alpha")]
    msgs += [assistant("alpha"), assistant("alpha beta")]
    for t in range(1, 4):
        msgs += [user("alpha"), *exchange(t, "alpha"), assistant("alpha")]
    msgs += [user("alpha"), *exchange(4, "alpha"), assistant(text(162, 7))]
    msgs += [user(text(12, 1)), *exchange(5, text(40, 7)), *exchange(6, text(40, 7))]
    for i, m in enumerate(msgs):
        if m["role"] != "tool":
            m["name"] = f"m{i}"
    system = 'Rules. <context section="memory" priority="high">blk0 b0w0 b0w1 b0w2 b0w3</context>'
    msgs.insert(0, {"role": "system", "content": system})
    policy = Policy(
        history=HistoryPolicy(keep_recent=0),
        cache=CachePolicy(enabled=False),
        budget=BudgetPolicy(on_required_overflow="truncate"),
    )
    out = plan_request(body_of(msgs), policy, WORDS, 300)
    sent = out.body["messages"]
    assert "blk0 b0w0 b0w1 b0w2 b0w3" in _system_text(out.body)
    assert msgs[-5:] == sent[-5:]  # the current turn as it came
    reply = next(m for m in sent if m.get("name") == "m20")
    assert str(reply["content"]).startswith("alpha A12 ledger")  # cut, with its text
    assert out.tokens_after is not None and out.tokens_after <= 300 - 16
