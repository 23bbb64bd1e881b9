"""Excerpts: an old tool result too big to keep whole is cut to its head and the parts that
hold what the conversation went on to use or the newest commands name."""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.planner.budget.compact import compact_json
from proxy.planner.budget.excerpt import HEAD_CHARS, MAX_SHARE, excerpt, strings_to_keep
from proxy.planner.request import plan_request
from proxy.policy.model import BudgetPolicy, CachePolicy, Policy
from proxy.relevance.ids import figures_in
from proxy.tokens import TokenCounter
from tests.planner.budget.test_agents import paired
from tests.planner_fakes import WordTokenizer

WORDS = WordTokenizer()
GPT_4O = TokenCounter().for_model("gpt-4o", Policy())
PER_REQUEST = Policy(budget=BudgetPolicy(ratio=1.0), cache=CachePolicy(enabled=False))


def flights(n: int) -> str:
    """A flight search's JSON result on one line, as a tool returns it."""
    rows = [
        {"flight_number": f"HAT{100 + j}", "origin": "JFK", "destination": "SFO",
         "status": "available", "prices": {"economy": 100 + 7 * j, "business": 400 + 9 * j}}
        for j in range(n)
    ]  # fmt: skip
    return json.dumps(rows)


def test_an_excerpt_keeps_the_head_and_a_window_around_each_string() -> None:
    text = flights(30)
    out = excerpt(text, ["HAT117", "219"], ("search_flights", "m-0"), 1200)
    assert out is not None
    assert out.startswith(text[:HEAD_CHARS])
    assert "HAT117" in out and "219" in out and " […] " in out
    assert out.endswith("[context-proxy: result of search_flights cut from 1,200 tokens to the "
                        "parts naming HAT117, 219, recall m-0]")  # fmt: skip
    assert len(out) < MAX_SHARE * len(text)
    assert "HAT105" not in out  # what nothing named is gone


def test_lines_are_kept_whole_in_a_text_of_lines() -> None:
    lines = [f"def handler_{j}(request):  # route {j}" for j in range(80)]
    text = "\n".join(lines)
    out = excerpt(text, ["handler_42"], ("read_file", "m-0"), 900)
    assert out is not None
    assert "\ndef handler_42(request):  # route 42\n[…]" in out
    assert out.startswith("def handler_0(request)")  # the head ends at a line's end


def test_no_excerpt_without_a_string_found_or_when_it_would_keep_most() -> None:
    text = flights(30)
    assert excerpt(text, [], ("f", "m-0"), 100) is None
    assert excerpt(text, ["NOT_THERE_1"], ("f", "m-0"), 100) is None
    assert excerpt("short result 123", ["123"], ("f", "m-0"), 5) is None
    every = sorted(figures_in(text))
    out = excerpt(text, every, ("f", "m-0"), 1200)  # windows stop at half the text
    assert out is None or len(out) < (MAX_SHARE + 0.1) * len(text)


def test_the_strings_kept_are_those_used_later_or_named_now() -> None:
    text = flights(20)
    said = {"HAT104": 5, "128": 5, "elsewhere_77": 5, "HAT105": 2}  # HAT105: said before
    held = figures_in(text)
    assert strings_to_keep(text, held, 3, said, ["destination"]) == ["destination", "HAT104", "128"]
    assert strings_to_keep(text, held, 3, {}, []) == []


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=3000), st.lists(st.text(min_size=1, max_size=12), max_size=8))
def test_any_text_and_strings_give_a_short_excerpt_or_none(text: str, strings: list[str]) -> None:
    out = excerpt(text, strings, ("tool", "m-0"), 10)
    if out is None:
        return
    assert out.startswith(text[: min(len(text), 10)])
    body = out.rsplit("\n[context-proxy:", 1)[0]
    assert len(body) <= MAX_SHARE * len(text) + 6 * (len(strings) + 2)


def booking(search: str) -> list[dict[str, Any]]:
    """A customer-service chat: a search, the assistant naming an option, the user picking
    it, and now the booking to be made."""

    def call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"c{i}", "type": "function",
            "function": {"name": name, "arguments": orjson.dumps(args).decode()}}]}  # fmt: skip

    return [
        {"role": "system", "content": "You are the airline's agent."},
        {"role": "user", "content": "I want a flight from New York to San Francisco"},
        {"role": "assistant", "content": "Let me search."},
        call(0, "search_flights", {"origin": "JFK", "destination": "SFO"}),
        {"role": "tool", "tool_call_id": "c0", "content": search},
        {"role": "assistant", "content": "Flight HAT117 has economy seats at $219."},
        {"role": "user", "content": "Great, book that one in economy please"},
    ]


def test_an_old_search_too_big_to_keep_is_cut_to_the_flight_then_chosen() -> None:
    search = flights(60)
    msgs = booking(search)
    body = {"model": "gpt-4o", "messages": copy.deepcopy(msgs)}
    whole = plan_request(copy.deepcopy(body), PER_REQUEST, GPT_4O, 100_000)
    assert whole.body["messages"] == msgs  # within budget: as it came
    out = plan_request(body, PER_REQUEST, GPT_4O, 1000)
    sent = out.body["messages"]
    assert paired(sent)
    [result] = [m for m in sent if m.get("role") == "tool"]
    packed = compact_json(search)
    assert packed is not None
    assert result["content"].startswith(packed[:HEAD_CHARS])  # an excerpt of the compacted JSON
    assert "HAT117" in result["content"] and "219" in result["content"]
    assert "to the parts naming" in result["content"]
    assert out.tokens_after <= out.budget
    assert sent[-1] == msgs[-1] and sent[0] == msgs[0]
    [decision] = [it for it in out.report.items if it.action == "clear"]
    assert "to the parts that matter" in decision.reason


def test_an_old_json_result_is_compacted_before_anything_is_cut() -> None:
    search = flights(60)
    msgs = booking(search)
    body = {"model": "gpt-4o", "messages": copy.deepcopy(msgs)}
    before = GPT_4O.count_request(body)
    packed = compact_json(search)
    assert packed is not None
    # Over the budget, but within it once the search is sent without its spaces.
    saved = GPT_4O.count_text(search) - GPT_4O.count_text(packed)
    out = plan_request(body, PER_REQUEST, GPT_4O, before - saved // 2)
    sent = out.body["messages"]
    assert [m for m in sent if m.get("role") == "tool"] == [{**msgs[4], "content": packed}]
    assert json.loads(packed) == json.loads(search)
    assert len(sent) == len(msgs)  # nothing else touched: the rest as it came
    assert all(a == b for a, b in zip(sent, msgs, strict=True) if b.get("role") != "tool")
    [decision] = [it for it in out.report.items if it.action == "compact"]
    assert decision.reason.startswith("compacted: result of search_flights")
    assert out.report.to_json()["counts"]["compact"] == 1
    assert out.truncated == 0 and out.dropped == 0 and out.trimmed == 1
