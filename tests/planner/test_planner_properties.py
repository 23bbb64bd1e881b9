"""Properties of the planner over random conversations (hypothesis).

Tool calls, multi-part content, inline tags (good and malformed), x_context (good and
bad), headings, huge messages, unicode and odd shapes. Every message carries a `name`
("m<i>") so a forwarded message can be traced back to the request.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.errors import ContextLengthExceeded
from proxy.planner.parts.decision import MARKER
from proxy.planner.parts.groups import shape
from proxy.planner.request import ExtraSummary, Offered, plan_request
from proxy.policy.model import BudgetPolicy, HistoryPolicy, Policy, TagsPolicy, VisibilityPolicy
from proxy.tokens.counter import TokenCounter
from proxy.types import Tokenizer
from tests.planner_fakes import WordTokenizer

WORDS = WordTokenizer()
PLACEHOLDER = "[context-proxy: "
CUT = " tokens of this reply cut, recall "
REAL = TokenCounter().for_model("gpt-4o-mini", Policy())
VOCAB = [
    "alpha",
    "beta",
    "zebra",
    "tea",
    "Paris",
    "42",
    "naïve",
    "日本語",
    "emoji🙂",
    "x",
    "the",
    "ok",
]
SECTIONS = ["memory", "retrieved_context", "working_state", "goal", "conversation_summary", "bogus"]
PRIORITIES = ["high", "medium", "low", "required", "urgent"]

word_lists = st.lists(st.sampled_from(VOCAB), min_size=0, max_size=60)
text_st = st.one_of(
    word_lists.map(" ".join),
    st.text(
        alphabet=st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)), max_size=80
    ),
    st.integers(200, 1500).map(lambda n: " ".join(VOCAB[i % len(VOCAB)] for i in range(n))),  # huge
)


@st.composite
def tagged_text(draw: st.DrawFn, counter: list[int]) -> str:
    """Text with inline blocks (each with a unique id) and sometimes a malformed tag."""
    out = draw(text_st)
    for _ in range(draw(st.integers(0, 2))):
        counter[0] += 1
        attrs = f'id="b{counter[0]}"'
        if draw(st.booleans()):
            attrs += f' section="{draw(st.sampled_from(SECTIONS))}"'
        if draw(st.booleans()):
            attrs += f' priority="{draw(st.sampled_from(PRIORITIES))}"'
        if draw(st.booleans()):
            attrs += f' score="{draw(st.floats(0, 1))}"'
        if draw(st.booleans()):
            attrs += f' cluster="c{draw(st.integers(0, 2))}"'
        out += f" <context {attrs}>{draw(text_st)}</context> {draw(word_lists.map(' '.join))}"
    return out


@st.composite
def x_context(draw: st.DrawFn) -> Any:
    return draw(
        st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "section": st.sampled_from(SECTIONS),
                    "priority": st.sampled_from(PRIORITIES),
                    "id": st.sampled_from(["i1", "i2"]),
                    "cluster": st.sampled_from(["c0", "c1", "c2"]),
                    "score": st.one_of(st.floats(0, 1), st.just("bad")),
                    "summary_of": st.sampled_from(["c0", "c1", "c2"]),
                },
            ),
            st.just("garbage"),
        )
    )


@st.composite
def conversations(draw: st.DrawFn) -> list[Any]:
    counter = [0]
    msgs: list[Any] = []
    if draw(st.booleans()):
        system = draw(tagged_text(counter))
        if draw(st.booleans()):
            system += "\n## Memory\n- tea\n- zebra\n## Conversation Summary\n- tea\n- beta\n# Rules\nbe kind"
        msgs.append({"role": "system", "content": system})
    call_n = 0
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(
            st.sampled_from(["user", "assistant", "tool", "parts", "odd", "system", "user"])
        )
        if kind == "tool":
            call_n += 1
            ids = [f"call{call_n}_{k}" for k in range(draw(st.integers(1, 2)))]
            calls = [
                {
                    "id": i,
                    "type": "function",
                    "function": {"name": "f", "arguments": draw(word_lists.map(" ".join))},
                }
                for i in ids
            ]
            msgs.append({"role": "assistant", "content": None, "tool_calls": calls})
            msgs += [
                {"role": "tool", "tool_call_id": i, "content": draw(tagged_text(counter))}
                for i in ids
            ]
        elif kind == "parts":
            parts: list[Any] = [{"type": "text", "text": draw(tagged_text(counter))}]
            if draw(st.booleans()):
                parts.append(
                    {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}}
                )
            msgs.append({"role": draw(st.sampled_from(["user", "assistant"])), "content": parts})
        elif kind == "odd":
            msgs.append(
                draw(
                    st.sampled_from(
                        [None, 3, {"role": "user", "content": 5}, {"role": "user", "content": None}]
                    )
                )
            )
        else:
            msgs.append({"role": kind, "content": draw(tagged_text(counter))})
        last = msgs[-1]
        if isinstance(last, dict) and draw(st.integers(0, 4)) == 0:
            last["x_context"] = draw(x_context())
    if draw(st.booleans()):
        msgs.append(
            {
                "role": "user",
                "content": 'stray </context> then <context section="memory"> never closed',
            }
        )
    msgs.append({"role": "user", "content": draw(tagged_text(counter))})
    for i, m in enumerate(msgs):
        if (
            isinstance(m, dict)
            and m.get("role") != "tool"
            and isinstance(m.get("content"), str | list | None)
        ):
            m["name"] = f"m{i}"
    return msgs


policies = st.builds(
    lambda overflow, relevance, keep, note, inline: Policy(
        budget=BudgetPolicy(on_required_overflow=overflow),
        history=HistoryPolicy(keep_recent=keep, relevance=relevance, neighbors=keep % 2),
        visibility=VisibilityPolicy(prompt_report=note),
        tags=TagsPolicy(inline_in_user=inline),
    ),
    st.sampled_from(["reject", "truncate"]),
    st.sampled_from(["bm25", "off"]),
    st.integers(0, 4),
    st.booleans(),
    st.booleans(),
)


_OPERATOR = ("system", "developer")


def count(body: dict[str, Any], tokenizer: Tokenizer) -> int:
    from proxy.planner.parts.costs import count_message, overhead

    return sum(count_message(tokenizer, m) for m in body["messages"]) + overhead(
        tokenizer, body, body["messages"]
    )


def texts_of(message: Any) -> list[str]:
    if not isinstance(message, dict):
        return []
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]
    return []


def check(
    msgs: list[Any],
    policy: Policy,
    window: int,
    tokenizer: Tokenizer,
    extra: list[ExtraSummary] | None = None,
) -> None:
    body = {"model": "m", "messages": msgs}
    snapshot = orjson.dumps(body)
    try:
        out = plan_request(body, policy, tokenizer, window, offered=Offered(extra or ()))
    except ContextLengthExceeded as refused:
        # Refused only by the policy, or when what cannot be cut is over the window itself.
        over_window = "over the model's context window" in str(refused)
        assert policy.budget.on_required_overflow == "reject" or over_window
        return
    assert orjson.dumps(body) == snapshot  # the request is never mutated
    fwd = out.body["messages"]
    assert out.budget is not None
    real = count(out.body, tokenizer)
    assert real == out.tokens_after
    assert window is None or out.tokens_before <= window or real <= window  # never over it
    overflowed = any(p.startswith("required parts over the budget") for p in out.problems)
    if not overflowed:
        assert real <= out.budget
    # No x_context forwarded; no tag of the text the policy reads for tags (the operator's,
    # and users' when it opts in). Other text (assistant, tool) goes as it was written.
    reads = ("system", "developer", "user") if policy.tags.inline_in_user else _OPERATOR
    role_of = {m["name"]: m.get("role") for m in msgs if isinstance(m, dict) and "name" in m}
    for m in fwd:
        assert not (isinstance(m, dict) and "x_context" in m)
        if role_of.get(m.get("name") if isinstance(m, dict) else None) in reads:
            for t in texts_of(m):
                assert '<context id="b' not in t
    # Order kept; required messages present.
    names = [m["name"] for m in fwd if isinstance(m, dict) and isinstance(m.get("name"), str)]
    moved = {f"m{it.message}" for it in out.report.items if it.action == "summary-inserted"}
    order = [int(n[1:]) for n in names if n not in moved]  # summaries move to their cluster
    assert order == sorted(order)
    sh = shape(msgs, policy.tools.keep_recent)
    for i, m in enumerate(msgs):
        role = m.get("role") if isinstance(m, dict) else None
        # A system message tagged with a section or priority of its own is not required
        # tags mean what they say; agent history is not the current turn.
        if (
            (
                (role in ("system", "developer") and not _own_tag(m))
                or (i >= sh.current_start and i not in sh.agent)
                # the setup: kept whole (cut, in the worst case), but for an operator's
                # message tagged with a section of its own
                or (i < sh.setup_end and not (role in ("system", "developer") and _own_tag(m)))
            )
            and isinstance(m, dict)
            and "name" in m
        ):
            assert f"m{i}" in names
    # Opaque messages travel untouched.
    for m in msgs:
        if not isinstance(m, dict) and i >= 0:
            assert m in fwd
    # Kept messages unchanged (those with no tags of their own and no cut).
    originals = {
        m["name"]: m for m in msgs if isinstance(m, dict) and isinstance(m.get("name"), str)
    }
    for m in fwd:
        name = m.get("name") if isinstance(m, dict) else None
        if name in originals:
            orig = originals[name]
            tagged = orig.get("role") in reads and "<context" in orjson.dumps(orig).decode()
            headed = orig.get("role") in _OPERATOR and "#" in "".join(texts_of(orig))
            plain = not tagged and not headed
            # cut, or a reply replaced by its placeholder (a turn kept without its reply)
            cut = any(MARKER in t or t.startswith(PLACEHOLDER) or CUT in t for t in texts_of(m))
            if plain and not cut and not policy.visibility.prompt_report:
                assert m == {k: v for k, v in orig.items() if k != "x_context"}
    # Tool groups whole.
    fwd_calls = {
        c["id"]
        for m in fwd
        if isinstance(m, dict)
        for c in m.get("tool_calls") or ()
        if isinstance(c, dict)
    }
    fwd_results = [
        m["tool_call_id"] for m in fwd if isinstance(m, dict) and m.get("role") == "tool"
    ]
    assert set(fwd_results) <= fwd_calls
    orig_results = {
        m["tool_call_id"] for m in msgs if isinstance(m, dict) and m.get("role") == "tool"
    }
    assert fwd_calls & orig_results <= set(fwd_results)
    # Deterministic.
    again = plan_request(
        copy.deepcopy(body), policy, tokenizer, window, offered=Offered(extra or ())
    )
    assert orjson.dumps(again.body) == orjson.dumps(out.body)
    # Untagged and within budget: the very same body.
    if (
        not out.trimmed
        and not policy.visibility.prompt_report
        and "x_context" not in snapshot.decode()
        and b"<context" not in snapshot
    ):
        assert out.body is body and not out.changed


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(conversations(), policies, st.integers(20, 6000))
def test_planner_invariants(msgs: list[Any], policy: Policy, window: int) -> None:
    check(msgs, policy, window, WORDS)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(conversations(), policies, st.integers(200, 6000), st.integers(0, 6), st.integers(1, 8))
def test_planner_invariants_real_tokenizer(
    msgs: list[Any], policy: Policy, window: int, start: int, span: int
) -> None:
    check(msgs, policy, window, REAL, [ExtraSummary(start, start + span, "summary text of a span")])


@pytest.mark.parametrize("window", [30, 80, 200, 1000])
def test_lone_tags_are_forwarded_as_written(window: int) -> None:
    text = 'stray </context> then <context section="memory"> never closed'
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    out = plan_request(
        body, Policy(budget=BudgetPolicy(on_required_overflow="truncate")), WORDS, window
    )
    if out.truncated == 0:
        assert out.body["messages"][0]["content"] == text


def _own_tag(m: dict[str, Any]) -> bool:
    """A system message whose x_context names a section (not system_prompt), a summary or a
    priority: it takes that section's priority, as any other message does."""
    x = m.get("x_context")
    if not isinstance(x, dict):
        return False
    named = x.get("section") not in (None, "system_prompt", "bogus") or x.get("summary_of")
    return bool(named) or x.get("priority") is not None
