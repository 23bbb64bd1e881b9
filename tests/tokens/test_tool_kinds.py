"""Every tool a request declares is counted: functions nested or flat, custom tools with
their grammar, namespaces as their functions, built-in and unknown kinds as their JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from proxy.items import to_chat
from proxy.policy.model import Policy
from proxy.tokens import TokenCounter
from proxy.tokens.tool_kinds import tool_functions

TOKENS = TokenCounter().chat_tokenizer("gpt-4o", Policy())
USER = [{"role": "user", "content": "hi"}]


def functions(n: int) -> list[dict[str, Any]]:
    return [
        {"type": "function", "name": f"agent_{k}", "description": f"Does task {k} for the team.",
         "parameters": {"type": "object", "properties": {
             "message": {"type": "string", "description": "What to send."},
             "timeout_ms": {"type": "integer", "description": "How long to wait."}}}}
        for k in range(n)
    ]  # fmt: skip


def overhead(tools: Any) -> int:
    """The request's tokens beyond its messages (chat schema)."""
    body = {"model": "gpt-4o", "messages": USER, "tools": tools}
    return TOKENS.count_request(body) - TOKENS.count_request({"model": "gpt-4o", "messages": USER})


def responses_tokens(tools: Any) -> int:
    conv = to_chat({"model": "gpt-4o", "input": "hi", "tools": tools})
    return TOKENS.count_request(conv.body)


def test_a_namespace_counts_as_its_functions() -> None:
    """Codex declares `multi_agent_v1` as a namespace of five functions: it counted as
    nothing, ~1,600 tokens short of what the upstream billed."""
    flat = functions(5)
    namespace = {"type": "namespace", "name": "multi_agent_v1",
                 "description": "Agents working together.", "tools": flat}  # fmt: skip
    as_functions = responses_tokens(flat)
    grouped = responses_tokens([namespace])
    assert grouped >= as_functions  # never under the functions it holds
    assert grouped - as_functions < 0.1 * as_functions  # its name and description on top
    assert responses_tokens([]) < as_functions / 2


def test_flat_and_nested_functions_count_alike() -> None:
    flat = functions(3)
    nested = [{"type": "function", "function": {k: v for k, v in f.items() if k != "type"}}
              for f in flat]  # fmt: skip
    assert overhead(flat) == overhead(nested) > 50


def test_custom_tools_count_their_grammar() -> None:
    grammar = "start: begin_patch hunk+ end_patch\n" * 40
    bare = {"type": "custom", "name": "apply_patch", "description": "Apply a patch."}
    with_grammar = {**bare, "format": {"type": "grammar", "syntax": "lark", "definition": grammar}}
    assert overhead([with_grammar]) - overhead([bare]) > TOKENS.count_text(grammar) * 0.9
    chat_shape = {
        "type": "custom",
        "custom": {k: v for k, v in with_grammar.items() if k != "type"},
    }
    assert overhead([chat_shape]) == overhead([with_grammar])


def test_built_in_and_unknown_tools_count_as_their_json() -> None:
    for tool in (
        {"type": "web_search", "search_context_size": "high"},
        {"type": "file_search", "vector_store_ids": ["vs_1", "vs_2"]},
        {"type": "mcp", "server_label": "deepwiki", "server_url": "https://mcp.example/mcp"},
        {"type": "local_shell"},
        {"type": "a_kind_nobody_knows_yet", "settings": {"x": [1, 2, 3]}},
    ):
        json_tokens = TOKENS.count_text(orjson.dumps(tool).decode())
        assert overhead([tool]) >= json_tokens, tool
        assert responses_tokens([tool]) > responses_tokens([]), tool


def test_odd_tools_are_left_out_not_crashed_on() -> None:
    assert tool_functions([None, 3, "x", {"type": "namespace", "tools": 7}]) == [{}]
    assert tool_functions("not a list") == []


def test_a_request_captured_from_codex_counts_its_tools_by_the_functions_rule() -> None:
    """A request the Codex CLI (0.171) sent, kept as it came: eight functions, the
    `multi_agent_v1` namespace and `web_search`. Its count is within 2% of the same
    request with the namespace spread into plain functions (the rule OpenAI publishes for
    functions), and never under it."""
    captured = orjson.loads((Path(__file__).parent / "data" / "codex_request.json").read_bytes())
    kinds = [t["type"] for t in captured["tools"]]
    assert "namespace" in kinds and "web_search" in kinds  # the shapes that went uncounted
    flat: list[Any] = []
    for tool in captured["tools"]:
        if tool["type"] == "namespace":
            flat.extend(tool["tools"])
        elif tool["type"] == "function":
            flat.append(tool)

    def tokens(body: dict[str, Any]) -> int:
        return TOKENS.count_request(to_chat(body).body)

    as_sent, spread = tokens(captured), tokens({**captured, "tools": flat})
    assert spread <= as_sent <= spread * 1.02, (as_sent, spread)
    without = tokens({**captured, "tools": []})
    assert as_sent - without > 3000  # the tools are most of a Codex request's overhead
