"""Hostile input: whatever the body, the parser and planner answer with a ProxyError or a plan."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.errors import ProxyError
from proxy.planner.request import plan_request
from proxy.policy.model import ModelPolicy, Policy
from proxy.server.request_body import parse_chat_body
from proxy.tokens.counter import TokenCounter

COUNTER = TokenCounter()
SMALL_WINDOW = Policy(models={"gpt-4o": ModelPolicy(context_window=300)})
TRUNCATE = Policy(
    models={"gpt-4o": ModelPolicy(context_window=300)},
    budget=Policy().budget.__class__(on_required_overflow="truncate"),
)

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=50),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=30,
)
tag_text = st.lists(
    st.sampled_from(
        [
            "<context>",
            "</context>",
            '<context section="memory">',
            '<context section="bogus" priority="x">',
            '<context section="retrieved_context" score="0.3" id="a">',
            "<context id=",
            "hello ",
            "wörld ",
            "## Memory\n",
            "# Goal\n",
            "\n",
            "🙂",
            "x" * 200,
        ]
    ),
    max_size=12,
).map("".join)
content = st.one_of(
    tag_text,
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    json_value,
    st.lists(
        st.one_of(
            st.fixed_dictionaries({"type": st.just("text"), "text": tag_text}),
            st.fixed_dictionaries(
                {
                    "type": st.just("image_url"),
                    "image_url": st.one_of(
                        json_value,
                        st.fixed_dictionaries(
                            {
                                "url": st.text(max_size=30),
                                "detail": st.sampled_from(["low", "high", "auto", 3]),
                            }
                        ),
                    ),
                }
            ),
            json_value,
        ),
        max_size=4,
    ),
)
x_context = st.one_of(
    st.none(),
    json_value,
    st.fixed_dictionaries(
        {},
        optional={
            "section": st.one_of(st.sampled_from(["memory", "goal", "nope"]), json_value),
            "priority": st.one_of(st.sampled_from(["high", "low", "required", "bad"]), json_value),
            "id": json_value,
            "cluster": json_value,
            "score": json_value,
            "summary_of": json_value,
        },
    ),
)
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(
            ["system", "developer", "user", "assistant", "tool", "function", "weird"]
        )
    },
    optional={
        "content": content,
        "x_context": x_context,
        "name": json_value,
        "tool_calls": json_value,
        "tool_call_id": json_value,
    },
)
body = st.fixed_dictionaries(
    {"model": st.just("gpt-4o"), "messages": st.lists(message, min_size=1, max_size=12)},
    optional={
        "tools": json_value,
        "max_tokens": st.one_of(st.integers(0, 400), json_value),
        "response_format": json_value,
        "stream": st.booleans(),
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(json_value, body))
def test_any_json_body_gives_a_plan_or_a_proxy_error(value: Any) -> None:
    raw = orjson.dumps(value)
    for policy in (SMALL_WINDOW, TRUNCATE, Policy()):
        try:
            parsed = parse_chat_body(raw)
            tokenizer = COUNTER.for_model(parsed["model"], policy)
            outcome = plan_request(
                parsed, policy, tokenizer, 300 if policy is not Policy() else None
            )
        except ProxyError as exc:
            assert 400 <= exc.status < 500
            continue
        orjson.dumps(outcome.body)  # always serializable
        assert not any(isinstance(m, dict) and "x_context" in m for m in outcome.body["messages"])
        if outcome.budget is not None and policy is SMALL_WINDOW:
            assert outcome.tokens_after <= outcome.budget


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_crash_the_parser(raw: bytes) -> None:
    try:
        parse_chat_body(raw)
    except ProxyError as exc:
        assert exc.status == 400


def test_pathological_inputs() -> None:
    cases = [
        b"[" * 100_000 + b"]" * 100_000,  # deep nesting
        b'{"model": "gpt-4o", "messages": [{"role": "user", "content": 1e999}]}',
        b'{"model": "gpt-4o", "messages": [{"role": "user", "content": Infinity}]}',
        b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}',  # lone surrogate
        b'{"model": "gpt-4o", "messages": [{"role": "user", "content": 123456789012345678901234567890}]}',
    ]
    for raw in cases:
        try:
            parsed = parse_chat_body(raw)
        except ProxyError as exc:
            assert exc.status == 400
            continue
        plan_request(parsed, SMALL_WINDOW, COUNTER.for_model("gpt-4o", SMALL_WINDOW), 300)


def test_thousands_of_messages_and_huge_strings() -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "rules " * 10}]
    for i in range(3000):
        messages.append(
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " * 5}
        )
    messages.append({"role": "user", "content": '<context section="memory">' * 500 + "q"})
    policy = Policy(models={"gpt-4o": ModelPolicy(context_window=4000)})
    outcome = plan_request(
        {"model": "gpt-4o", "messages": messages}, policy, COUNTER.for_model("gpt-4o", policy), 4000
    )
    assert outcome.tokens_after <= (outcome.budget or 0)
    huge = {"model": "gpt-4o", "messages": [{"role": "user", "content": "ab " * 2_000_000}]}
    try:
        plan_request(huge, policy, COUNTER.for_model("gpt-4o", policy), 4000)
    except ProxyError as exc:
        assert exc.code == "context_length_exceeded"
