"""Hot path: a body without tools costs the priming alone, known without a walk;
a model's name variants are made once, not on each of a request's two lookups."""

from __future__ import annotations

from unittest import mock

import pytest

from proxy.policy.model import Policy
from proxy.tokens import windows as windows_module
from proxy.tokens.chat import ChatTokenizer
from proxy.tokens.counter import TokenCounter
from proxy.tokens.request_overhead import request_overhead
from proxy.tokens.windows import ContextWindows, model_names


@pytest.fixture(scope="module")
def tokenizer() -> ChatTokenizer:
    return TokenCounter().chat_tokenizer("gpt-4o", Policy())


PLAIN = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def test_overhead_of_a_body_without_tools_skips_the_walk(tokenizer: ChatTokenizer) -> None:
    expected = tokenizer._scale(request_overhead(PLAIN, tokenizer.count_text, 3))
    walked = AssertionError("walked")
    with mock.patch("proxy.tokens.chat.request_overhead", side_effect=walked):
        assert tokenizer.count_request_overhead(PLAIN) == expected
        assert tokenizer.count_request_overhead({"max_tokens": 5, "n": 2}) == expected


@pytest.mark.parametrize(
    "extra",
    [
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
        {"functions": [{"name": "f", "parameters": {}}]},
        {"tool_choice": "none"},
        {"function_call": {"name": "f"}},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {}}}},
    ],
)
def test_overhead_with_tools_or_schema_still_counts_them(
    tokenizer: ChatTokenizer, extra: dict[str, object]
) -> None:
    body = {**PLAIN, **extra}
    expected = tokenizer._scale(request_overhead(body, tokenizer.count_text, 3))
    assert tokenizer.count_request_overhead(body) == expected
    assert tokenizer.count_request_overhead(body) != tokenizer.count_request_overhead(PLAIN)


TOOLS = {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}


def test_a_tool_sets_overhead_is_rendered_once_and_keyed_by_all_it_reads(
    tokenizer: ChatTokenizer,
) -> None:
    """The same tools are rendered and counted once; what the count reads beside them (the
    first system message, there or not, and its text; the tool choice) is in its key."""
    bodies = [
        {**PLAIN, **TOOLS},
        {**PLAIN, **TOOLS, "tool_choice": "none"},
        {**PLAIN, **TOOLS, "messages": [{"role": "system", "content": None}]},
        {**PLAIN, **TOOLS, "messages": [{"role": "system", "content": "Be brief."}]},
    ]
    expected = [tokenizer._scale(request_overhead(b, tokenizer.count_text, 3)) for b in bodies]
    assert len(set(expected[:3])) == 3  # a choice, a system message: each its own count
    assert [tokenizer.count_request_overhead(b) for b in bodies] == expected
    walked = AssertionError("walked")
    with mock.patch("proxy.tokens.chat.request_overhead", side_effect=walked):
        assert [tokenizer.count_request_overhead(b) for b in bodies] == expected


def test_name_variants_are_made_once_per_model() -> None:
    windows = ContextWindows()
    policy = Policy()
    window = windows.lookup("openai/gpt-4o-2024-08-06", policy)  # the first: made here
    with mock.patch.object(windows_module, "_DATE_SUFFIX") as suffix:
        for _ in range(5):
            assert windows.lookup("openai/gpt-4o-2024-08-06", policy) == window
            assert windows.registry_window("openai/gpt-4o-2024-08-06") == window
    assert not suffix.sub.called
    assert model_names("openai/gpt-4o-2024-08-06") == [
        "openai/gpt-4o-2024-08-06",
        "gpt-4o-2024-08-06",
        "openai/gpt-4o",
        "gpt-4o",
    ]
    names = model_names("gpt-4o")
    names.append("mutated")  # callers get their own list: the memo is not changed
    assert model_names("gpt-4o") == ["gpt-4o"]
