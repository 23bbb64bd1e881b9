"""Counting held to every published API-reported figure (tests/data/count_fixtures.json), and tool
schemas of any shape counted without raising, in linear time (issues 15 and 16)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from proxy.policy.model import Policy
from proxy.tokens.chat import ChatTokenizer
from proxy.tokens.counter import TokenCounter
from proxy.tokens.function_schema import format_functions, json_text, render_functions

Case = tuple[str, str, dict[str, Any], int]  # source, model, body, prompt_tokens reported
_FIXTURES = json.loads((Path(__file__).parent / "data" / "count_fixtures.json").read_text())
CASES: list[Case] = [(c["source"], c["model"], c["body"], c["tokens"]) for c in _FIXTURES["cases"]]


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


def count(counter: TokenCounter, model: str, body: dict[str, Any]) -> int:
    return counter.chat_tokenizer(model, Policy()).count_request(body)


def test_published_counts_are_exact_and_never_under(counter: TokenCounter) -> None:
    results = [(case, count(counter, case[1], case[2])) for case in CASES]
    exact = sum(got == case[3] for case, got in results)
    under = [(case[0], case[1], case[3], got) for case, got in results if got < case[3]]
    # Before: 97 of 121 exact, 7 under (an anyOf tool 47.5% under); then 109, all misses over;
    # nesting split by request shape (legacy functions / tools): 114; tools with an
    # undescribed property 1 less: 119. Misses left: o1 images (no published rule, over).
    assert exact >= 119, f"{exact}/{len(CASES)} exact"
    assert under == []


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{c[0]}-{c[1]}" for i, c in enumerate(CASES)])
def test_each_published_count_is_never_under(counter: TokenCounter, case: Case) -> None:
    _, model, body, expected = case
    assert count(counter, model, body) >= expected


def test_union_types_are_counted_as_unions(counter: TokenCounter) -> None:
    # hmarr's three-way anyOf: the API reported 80; `any` made it 42.
    union = next(c for c in CASES if c[0] == "hmarr" and c[3] == 80)
    assert count(counter, union[1], union[2]) == 80


def _case(source: str, tokens: int) -> Case:
    return next(c for c in CASES if c[0] == source and c[3] == tokens)


def test_legacy_functions_drop_nested_descriptions(counter: TokenCounter) -> None:
    # hmarr's gpt-3.5 figures: nested descriptions are not in the prompt (they were 21-28% over).
    for tokens in (46, 96):
        _, model, body, expected = _case("hmarr", tokens)
        assert count(counter, model, body) == expected


def test_tools_show_nested_descriptions_unindented(counter: TokenCounter) -> None:
    # pamelafox's tools figures: a nested description costs what it says, nested lines are
    # not indented (indented, they were 1-3 over; dropped, 7 under).
    for tokens in (73, 89, 103):
        _, model, body, expected = _case("pamelafox/functions", tokens)
        assert count(counter, model, body) == expected
    tools = [{"type": "function", "function": {"name": "f", "parameters": _NESTED}}]
    text = format_functions([tools[0]["function"]])
    assert "// inner\nb?: string," in text
    legacy = format_functions([tools[0]["function"]], legacy=True)
    assert "inner" not in legacy and "  b?: string," in legacy


def test_tools_with_an_undescribed_property_count_one_less_once(counter: TokenCounter) -> None:
    # pamelafox: an undescribed string or integer enum, top-level or nested (1 over before);
    # an undescribed string enum is not (73, exact both ways).
    for tokens in (49, 54, 64, 65, 73):
        for _, model, body, expected in (c for c in CASES if c[3] == tokens and "tools" in c[2]):
            assert count(counter, model, body) == expected
    tool = {"name": "f", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
    described = {**tool, "parameters": {"properties": {"q": {"description": "d"}}}}
    assert (
        render_functions([tool, {**tool, "name": "g"}], legacy=False)[1] == 1
    )  # once per request, however many such properties
    assert render_functions([tool], legacy=True)[1] == 0  # hmarr: legacy functions count all
    assert render_functions([described], legacy=False)[1] == 0


_NESTED = {
    "type": "object",
    "properties": {
        "a": {
            "type": "object",
            "description": "outer",
            "properties": {"b": {"type": "string", "description": "inner"}},
        }
    },
}


def test_named_legacy_function_call_costs_four_plus_its_name(counter: TokenCounter) -> None:
    body = {
        "messages": [{"role": "user", "content": "hello"}],
        "functions": [{"name": "foo", "parameters": {"type": "object", "properties": {}}}],
    }
    named = {**body, "function_call": {"name": "foo"}}
    tool = {**body, "tool_choice": {"type": "function", "function": {"name": "foo"}}}
    assert count(counter, "gpt-3.5-turbo", named) - count(counter, "gpt-3.5-turbo", body) == 5
    assert count(counter, "gpt-3.5-turbo", tool) - count(counter, "gpt-3.5-turbo", body) == 8


def test_refs_are_rendered_once_and_cycles_end() -> None:
    parameters = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/Node"}, "b": {"$ref": "#/$defs/Node"}},
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"label": {"type": "string"}, "next": {"$ref": "#/$defs/Node"}},
            }
        },
    }
    text = format_functions([{"name": "f", "parameters": parameters}])
    assert text.count("label?: string") == 1  # shown once, then by name
    assert "b?: Node," in text and "next?: Node," in text


def _nested(depth: int, leaf: Any, wrap: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = wrap(value)
    return value


MALFORMED: list[Any] = [
    {"name": "f", "parameters": "x"},
    {"name": "f", "parameters": {"type": "object", "properties": ["a", "b"]}},
    {"name": "f", "parameters": {"type": "object", "properties": {"a": "string"}}},
    {"name": "f", "parameters": {"properties": {"a": {"type": "array", "items": [1, {}]}}}},
    {"name": "f", "parameters": {"properties": {"a": {"type": ["string", 3], "enum": [{}]}}}},
    {"name": ["f"], "description": {"d": 1}, "parameters": {"properties": {"a": {"anyOf": 1}}}},
    {"name": "f", "parameters": {"properties": {"a": {"type": "object", "properties": 7}}}},
    {"name": "f", "parameters": {"properties": {"a": {"$ref": 5}, "b": {"$ref": "#/x/y"}}}},
    {"name": "f", "parameters": {"properties": {"a": {}}, "required": "a"}},
    {"name": "f", "parameters": {"properties": {"a": {"default": {}}}, "required": [{}, "a"]}},
    {"name": "f", "parameters": {"properties": {"a": {"title": [], "examples": [{}]}}}},
    {
        "name": "deep",
        "parameters": _nested(
            10_000, {"type": "string"}, lambda v: {"type": "object", "properties": {"x": v}}
        ),
    },
    {
        "name": "deep_union",
        "parameters": {"properties": {"u": _nested(10_000, {}, lambda v: {"anyOf": [v]})}},
    },
    {
        "name": "deep_items",
        "parameters": {
            "properties": {"a": _nested(10_000, {}, lambda v: {"type": "array", "items": v})}
        },
    },
    {"name": "deep_junk", "parameters": _nested(10_000, 1, lambda v: [v])},
]


@pytest.mark.parametrize("function", MALFORMED, ids=range(len(MALFORMED)))
@pytest.mark.parametrize("shape", ["tools", "functions"])
def test_any_json_schema_counts_without_raising(
    counter: TokenCounter, function: Any, shape: str
) -> None:
    tool = {"type": "function", "function": function} if shape == "tools" else function
    body = {"messages": [{"role": "user", "content": "hi"}], shape: [tool, "junk", 3, None]}
    tokenizer: ChatTokenizer = counter.chat_tokenizer("gpt-4o", Policy())
    n = tokenizer.count_request(body)
    bare = tokenizer.count_request({"messages": body["messages"]})
    assert n > bare  # the junk is counted, not skipped


def test_deep_response_format_schema_counts(counter: TokenCounter) -> None:
    deep = _nested(10_000, {"type": "string"}, lambda v: {"type": "object", "properties": {"x": v}})
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": deep}},
    }
    assert count(counter, "gpt-4o", body) > 10_000  # its JSON text, every level


def test_json_text_is_compact_json_at_any_depth() -> None:
    value = {"a": [1, 2.5, None, True, 'q"\\'], "b": {}}
    assert json_text(value) == '{"a":[1,2.5,null,true,"q\\"\\\\"],"b":{}}'
    assert json_text(_nested(100_000, 0, lambda v: [v])) == "[" * 100_000 + "0" + "]" * 100_000


def test_a_megabyte_of_hostile_schema_counts_in_linear_time(counter: TokenCounter) -> None:
    wide = {f"p{i}": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/X"}]} for i in range(8_000)}
    parameters = {
        "type": "object",
        "properties": wide,
        "$defs": {"X": {"type": "object", "properties": {"y": {"type": "number"}}}},
    }
    deep = _nested(20_000, {}, lambda v: {"type": "object", "properties": {"x": v}})
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {"type": "function", "function": {"name": "wide", "parameters": parameters}},
            {"type": "function", "function": {"name": "deep", "parameters": deep}},
        ],
    }
    assert len(json_text(body)) > 1_000_000
    start = time.perf_counter()
    assert count(counter, "gpt-4o", body) > 100_000
    assert time.perf_counter() - start < 5  # a linear pass takes well under a second


def test_defaults_titles_examples_and_nullable_are_counted() -> None:
    # openai/harmony's renderer shows them; counting them keeps newer models from going under.
    plain = {"type": "object", "properties": {"a": {"type": "string"}}}
    noted = {
        "type": "object",
        "properties": {
            "a": {
                "type": "string",
                "title": "A",
                "examples": ["x"],
                "default": "x",
                "nullable": True,
            }
        },
    }
    text = format_functions([{"name": "f", "parameters": noted}])
    assert text != format_functions([{"name": "f", "parameters": plain}])
    assert '// - "x"' in text and 'a?: string | null, // default: "x"' in text
