"""Hostile input: whatever the body, the parser and planner answer with a ProxyError or a plan."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.errors import ProxyError
from proxy.planner.request import plan_request
from proxy.policy.model import ModelPolicy, Policy
from proxy.server.pipeline.request_body import parse_chat_body
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
            # Within the budget, or the required parts alone within the window's limit.
            alone = any("forwarded alone" in p for p in outcome.problems)
            assert outcome.tokens_after <= (300 - 16 if alone else outcome.budget)


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


# --- Responses bodies of hostile shapes ---------------------------------------------------------

odd = st.one_of(json_value, st.lists(st.text(max_size=5), max_size=3), st.dictionaries(
    st.text(max_size=5), st.integers(), max_size=2))  # fmt: skip
call_ids = st.sampled_from(["c1", "c1", "c2", "", 7, None])  # duplicates, empty, wrong types
item = st.one_of(
    st.fixed_dictionaries(
        {"role": st.one_of(st.sampled_from(["user", "assistant", "system", "developer"]), odd)},
        optional={
            "type": st.one_of(st.just("message"), odd),
            "content": st.one_of(
                tag_text,
                st.lists(
                    st.one_of(
                        st.fixed_dictionaries(
                            {
                                "type": st.one_of(
                                    st.sampled_from(["input_text", "output_text"]), odd
                                )
                            },
                            optional={"text": st.one_of(tag_text, odd)},
                        ),
                        st.just({}),
                        odd,
                    ),
                    max_size=6,
                ),
                odd,
            ),
            "x_context": x_context,
        },
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call"), "call_id": call_ids},
        optional={"name": st.one_of(st.just("f"), odd), "arguments": st.one_of(st.just("{}"), odd)},
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call_output"), "call_id": call_ids},
        optional={"output": st.one_of(tag_text, odd), "x_context": x_context},
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["reasoning", "web_search_call", "x"])}, optional={"summary": odd}
    ),
    odd,
)
responses_body = st.fixed_dictionaries(
    {"model": st.just("gpt-4o")},
    optional={
        "input": st.one_of(st.lists(item, max_size=10), tag_text, odd),
        "instructions": st.one_of(tag_text, odd),
        "tools": odd,
        "tool_choice": odd,
        "max_output_tokens": st.one_of(st.integers(0, 400), odd),
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(responses_body, st.integers(0, 300))
def test_any_responses_body_gives_a_plan_or_a_client_error(value: Any, depth: int) -> None:
    """The server's steps for a Responses body (checks, reading items, planning, writing
    items back): a plan whose body is JSON without x_context, or a 4xx; never a crash.
    Bodies are also nested `depth` levels inside an opaque item."""
    from proxy.items import to_chat, to_responses
    from proxy.server.pipeline.body_limits import check_counts, check_density
    from proxy.server.pipeline.request_body import check_responses_body, encoded, parse_model_body

    if isinstance(value.get("input"), list):
        value["input"].append({"type": "web_search_call", "action": _nest(depth)})
    raw = _raw(value)
    for policy in (SMALL_WINDOW, TRUNCATE):
        try:
            check_density(raw)
            body = check_responses_body(parse_model_body(raw))
            check_counts(body.get("input"), "input", len(raw))
            conv = to_chat(body)
            tokenizer = COUNTER.for_model("gpt-4o", policy)
            outcome = plan_request(conv.body, policy, tokenizer, 300)
            sent = to_responses(body, conv, outcome.body["messages"])
            out = encoded(sent)
        except ProxyError as exc:
            assert 400 <= exc.status < 500
            continue
        assert b'"x_context"' not in out  # no key that long is drawn but the tags


def _nest(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def _raw(value: Any) -> bytes:
    """JSON of `value`, also past orjson's writing depth (written by hand, iteratively)."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        from proxy.tokens import deep_json_text

        return deep_json_text(value).encode()
