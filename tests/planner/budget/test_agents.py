"""Agents in the planner: agent history, clearing old tool results, tags on system
messages, and a required overflow that names what is too big."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.cli.plan_view import render_plan
from proxy.errors import ContextLengthExceeded
from proxy.planner.parts.decision import MARKER
from proxy.planner.parts.sections import build_layout
from proxy.planner.request import plan_request
from proxy.policy.model import BudgetPolicy, CachePolicy, HistoryPolicy, Policy, ToolsPolicy
from proxy.types import Priority
from tests.planner_fakes import WordTokenizer, without_ids

WORDS = WordTokenizer()
TRUNCATE = Policy(budget=BudgetPolicy(on_required_overflow="truncate"))
# The per-request planner (cache-stable cuts off), for tests of what it decides.
PER_REQUEST = Policy(budget=BudgetPolicy(ratio=1.0), cache=CachePolicy(enabled=False))


def call(i: int, command: str, thought: str = "THOUGHT: next") -> dict[str, Any]:
    args = orjson.dumps({"command": command}).decode()
    return {
        "role": "assistant",
        "content": thought,
        "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": args}}
        ],
    }


def result(i: int, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"c{i}", "content": text}


def run(steps: list[tuple[str, str]], system: str = "You are an agent.") -> list[dict[str, Any]]:
    """A system prompt, the task, then one exchange per (command, output)."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Fix the bug in the parser module please"},
    ]
    for i, (command, output) in enumerate(steps):
        msgs += [call(i, command), result(i, output)]
    return msgs


def filler(n: int, word: str = "line") -> str:
    return " ".join(f"{word}{j}" for j in range(n))


def plan(msgs: list[dict[str, Any]], window: int, policy: Policy | None = None) -> Any:
    body = {"model": "m", "messages": copy.deepcopy(msgs)}
    return plan_request(body, policy or Policy(budget=BudgetPolicy(ratio=1.0)), WORDS, window)


def paired(out: list[dict[str, Any]]) -> bool:
    pending: set[str] = set()
    for m in out:
        if m.get("role") == "tool":
            if m.get("tool_call_id") not in pending:
                return False
            pending.discard(m["tool_call_id"])
        else:
            if pending:
                return False
            pending = {c["id"] for c in m.get("tool_calls") or ()}
    return not pending


def test_newest_exchanges_are_the_current_turn_older_ones_history() -> None:
    msgs = run([(f"cat f{i}.py", filler(20)) for i in range(6)])
    layout = build_layout(msgs, Policy())
    by_msg = {it.msg: it for it in layout.items}
    older, newest = range(2, 8), range(8, 14)  # three exchanges each
    assert all(by_msg[i].priority is Priority.LOW for i in older)
    assert all(by_msg[i].tag == "agent history" and not by_msg[i].current for i in older)
    assert all(by_msg[i].priority is Priority.REQUIRED and by_msg[i].current for i in newest)
    assert by_msg[1].priority is Priority.REQUIRED  # the last user message
    few = build_layout(msgs, Policy(tools=ToolsPolicy(keep_recent=5)))
    assert sum(it.tag == "agent history" for it in few.items) == 2  # one exchange


def test_agent_run_over_budget_is_answered_by_clearing_old_results() -> None:
    """With every exchange after the task required, this was refused with a 400."""
    msgs = run([(f"cat f{i}.py", filler(300)) for i in range(8)])
    out = plan(msgs, 1800, PER_REQUEST)
    fwd = out.body["messages"]
    assert out.tokens_after <= out.budget and paired(fwd)
    assert fwd[-6:] == msgs[-6:] and msgs[1] in fwd  # newest exchanges and the task, as sent
    cleared = [m for m in fwd if m["content"].startswith("[context-proxy:")]
    assert cleared and all(
        without_ids(m["content"]) == "[context-proxy: result of bash cleared, 300 tokens]"
        for m in cleared
    )
    assert all(m in fwd for m in msgs if m.get("tool_calls"))  # every call kept: clearing did it
    assert out.cleared == len(cleared) and out.truncated == len(cleared)
    report = out.report.to_json()
    assert report["counts"]["clear"] == len(cleared)
    rows = [it for it in out.report.items if it.action == "clear"]
    assert len(rows) == len(cleared) and all(r.tokens_after < r.tokens for r in rows)
    assert "clear" in render_plan(out.report) and "cleared: result of bash" in render_plan(
        out.report
    )


def test_clearing_only_as_far_as_needed_oldest_first_without_relevance() -> None:
    msgs = run([(f"cat f{i}.py", filler(300)) for i in range(8)])
    policy = Policy(
        budget=BudgetPolicy(ratio=1.0),
        history=HistoryPolicy(relevance="off"),
        cache=CachePolicy(enabled=False),
    )
    out = plan(msgs, 2300, policy)
    fwd = out.body["messages"]
    ids = [m["tool_call_id"] for m in fwd if m["content"].startswith("[context-proxy:")]
    assert ids and len(ids) < 5  # not every old result: just enough to fit
    assert ids == [f"c{i}" for i in range(len(ids))]  # the oldest first
    assert out.tokens_after <= out.budget


def test_relevant_old_result_survives_an_irrelevant_newer_one() -> None:
    steps = [("grep -rn parse_header src", "src/http/headers.py:42: def parse_header(raw):")]
    steps[0] = (steps[0][0], steps[0][1] + " " + filler(300, "code"))
    steps += [(f"ls docs{i}", filler(300, "doc")) for i in range(3)]
    steps += [("echo a", "a"), ("echo b", "b")]
    msgs = run(steps)
    msgs.append(call(6, "sed -n 30,60p src/http/headers.py", "THOUGHT: parse_header in headers.py"))
    msgs.append(result(6, "ok"))
    out = plan(msgs, 1100)
    fwd = {m.get("tool_call_id"): m["content"] for m in out.body["messages"] if "tool_call_id" in m}
    assert "parse_header" in fwd["c0"]  # the oldest, but what the agent works on now
    assert any(fwd.get(f"c{i}", "").startswith("[context-proxy:") for i in (1, 2, 3))
    assert out.tokens_after <= out.budget


def test_exclude_and_min_tokens_are_never_cleared() -> None:
    msgs = run([(f"cat f{i}.py", filler(300)) for i in range(6)])
    msgs[3]["content"] = filler(50)  # under clear_min_tokens
    policy = Policy(budget=BudgetPolicy(ratio=1.0), tools=ToolsPolicy(clear_min_tokens=100))
    out = plan(msgs, 1400, policy)
    fwd = {m.get("tool_call_id"): m["content"] for m in out.body["messages"] if "tool_call_id" in m}
    assert not fwd.get("c0", "").startswith("[context-proxy:")
    assert out.tokens_after <= out.budget
    excluded = Policy(budget=BudgetPolicy(ratio=1.0), tools=ToolsPolicy(exclude=("bash",)))
    out = plan(msgs, 1400, excluded)
    assert not any(m["content"].startswith("[context-proxy:") for m in out.body["messages"])
    assert out.tokens_after <= out.budget and paired(out.body["messages"])
    off = Policy(budget=BudgetPolicy(ratio=1.0), tools=ToolsPolicy(clear=False))
    assert not any(
        m["content"].startswith("[context-proxy:") for m in plan(msgs, 1400, off).body["messages"]
    )


def test_overflow_names_the_tool_exchanges() -> None:
    msgs = run([(f"cat f{i}.py", filler(n)) for i, n in enumerate((100, 200, 900))])
    with pytest.raises(ContextLengthExceeded) as exc:
        plan(msgs, 800)
    text = exc.value.message
    assert "the 3 newest tool exchanges" in text and "largest: result of bash" in text
    assert "the last user message is" in text and "budget of 800" in text
    assert "Shorten the last message" not in text and "tools.keep_recent" in text


def test_truncate_cuts_the_newest_tool_result_before_the_system_prompt() -> None:
    msgs = run([(f"cat f{i}.py", filler(n)) for i, n in enumerate((100, 200, 900))])
    out = plan(msgs, 800, Policy(budget=BudgetPolicy(ratio=1.0, on_required_overflow="truncate")))
    fwd = out.body["messages"]
    assert fwd[0] == msgs[0]  # a small system prompt stays whole
    assert without_ids(fwd[-1]["content"]).endswith(MARKER + "]")  # the biggest result is cut
    assert fwd[1] == msgs[1]  # the last user message, cut last
    assert out.tokens_after <= out.budget and paired(fwd)


def test_summaries_as_tagged_system_messages_are_budgeted_not_required() -> None:
    """Seed 004's shape: one summary per session as a tagged system message."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
    for s in range(4):
        msgs.append(
            {
                "role": "system",
                "content": f"Summary of session {s}: " + filler(150, f"s{s}x"),
                "x_context": {"section": "conversation_summary", "summary_of": f"session{s}"},
            }
        )
        for t in range(6):
            role = "user" if t % 2 == 0 else "assistant"
            msgs.append(
                {
                    "role": role,
                    "content": filler(60, f"t{s}{t}"),
                    "x_context": {"cluster": f"session{s}"},
                }
            )
    msgs.append({"role": "user", "content": "what did we say?"})
    out = plan(msgs, 900, PER_REQUEST)  # the summaries alone (600+ tokens) would have been required
    assert out.tokens_after <= out.budget
    fwd = out.body["messages"]
    assert fwd[0]["content"] == "be brief" and fwd[-1]["content"] == "what did we say?"
    assert not any("x_context" in m for m in fwd)
    kinds = {it.action for it in out.report.items if it.section == "conversation_summary"}
    assert kinds & {"drop", "truncate", "summary-inserted"}


def test_x_context_without_a_section_keeps_a_system_message_required() -> None:
    msgs = [
        {"role": "system", "content": "rules", "x_context": {"id": "r1", "score": 0.5}},
        {"role": "user", "content": "hi"},
    ]
    item = build_layout(msgs, Policy()).items[0]
    assert (item.section.value, item.priority) == ("system_prompt", Priority.REQUIRED)


# -- properties over random agent-shaped requests ------------------------------------------


@st.composite
def agent_runs(draw: st.DrawFn) -> list[dict[str, Any]]:
    steps = draw(st.integers(0, 12))
    sizes = st.integers(0, 400)
    msgs = run(
        [(f"cmd {i} f{draw(st.integers(0, 5))}.py", filler(draw(sizes))) for i in range(steps)]
    )
    if draw(st.booleans()):  # sometimes a format-error reply mid-run, as the data has
        msgs.append({"role": "user", "content": "Please use exactly one bash block"})
        msgs += [call(99, "ls"), result(99, filler(draw(sizes)))]
    if draw(st.booleans()):
        msgs.append({"role": "assistant", "content": "done"})
    return msgs


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    agent_runs(), st.integers(150, 5000), st.sampled_from([0, 1, 3]), st.booleans(), st.booleans()
)
def test_agent_requests_fit_stay_paired_and_keep_the_current_turn(
    msgs: list[dict[str, Any]], window: int, keep: int, relevance: bool, cache: bool
) -> None:
    """Per request and in cache mode (planner/cache/agent.py: a recall message at the end, after
    the newest results, keeps the request paired)."""
    policy = Policy(
        budget=BudgetPolicy(ratio=1.0),
        tools=ToolsPolicy(keep_recent=keep, clear_min_tokens=20),
        history=HistoryPolicy(relevance="bm25" if relevance else "off"),
        cache=CachePolicy(enabled=cache),
    )
    body = {"model": "m", "messages": msgs}
    try:
        out = plan_request(copy.deepcopy(body), policy, WORDS, window)
    except ContextLengthExceeded:
        # Refused only when the setup (system, task) and the current turn alone are over.
        layout = build_layout(msgs, policy)
        required = [m for i, m in enumerate(msgs) if layout.in_current(i) or i < layout.setup_end]
        assert sum(WORDS.count_message(m) for m in required) + 3 > window
        return
    fwd = out.body["messages"]
    assert out.tokens_after <= window and paired(fwd)
    layout = build_layout(msgs, policy)
    current = [m for i, m in enumerate(msgs) if layout.in_current(i) or i < layout.setup_end]
    # The newest exchanges alone over the budget: the older of them go whole (every
    # agent request answered), the newest and the task stay.
    over = sum(WORDS.count_message(m) for m in current) + 3 > window
    newest = max((i for i, m in enumerate(msgs) if m.get("tool_calls")), default=len(msgs))
    for i, m in enumerate(msgs):
        exchange = m["role"] == "tool" or bool(m.get("tool_calls"))
        if (layout.in_current(i) or i < layout.setup_end or m["role"] == "system") and (
            not over or i >= newest or not exchange
        ):
            assert m in fwd  # byte-identical
    if out.tokens_before <= window:
        assert out.body is body or out.body == body
    again = plan_request(copy.deepcopy(body), policy, WORDS, window)
    assert orjson.dumps(again.body) == orjson.dumps(out.body)  # deterministic


def test_command_keys_and_agent_order() -> None:
    from proxy.planner.history import Now, keep_order, worth
    from proxy.planner.history.command_keys import command_keys

    keys = command_keys('bash {"command": "sed -n 1,40p django/db/models/deletion.py"}')
    assert "django/db/models/deletion.py" in keys and "deletion.py" in keys
    texts = ["nothing here", "see django/db/models/deletion.py:120", "more nothing"]
    now = Now("fix the bug", "cat django/db/models/deletion.py", "", True)
    values = worth(texts, [10, 10, 10], [0, 0, 0], now, None)
    order = keep_order(values, [1, 3, 5])
    assert order == [1, 2, 0]  # the one naming the file, then the newest first


def test_tagged_system_summaries_never_cost_the_turns_their_room() -> None:
    """LoCoMo with one summary per session sent as a tagged system message,
    the turns kept are those kept without the summaries (the summaries take what is left)."""
    turns: list[dict[str, Any]] = []
    for s in range(4):
        for t in range(6):
            role = "user" if t % 2 == 0 else "assistant"
            turns.append(
                {"role": role, "content": filler(60, f"t{s}{t}"), "x_context": {"cluster": f"s{s}"}}
            )
    summaries = [
        {
            "role": "system",
            "content": filler(80, f"sum{s}"),
            "x_context": {"section": "conversation_summary", "summary_of": f"s{s}"},
        }
        for s in range(4)
    ]
    ask = {"role": "user", "content": "what did we say about t21 ?"}
    plain = plan([{"role": "system", "content": "be brief"}, *turns, ask], 700)
    with_sums = plan([{"role": "system", "content": "be brief"}, *summaries, *turns, ask], 700)
    kept = [m["content"] for m in plain.body["messages"]]
    also = [m["content"] for m in with_sums.body["messages"]]
    assert all(k in also for k in kept)
    assert with_sums.tokens_after <= with_sums.budget


def test_older_agent_exchanges_are_kept_whole_or_dropped() -> None:
    """A cut result rarely holds what the agent needs next; whole exchanges fill the room."""
    msgs = run([(f"cat f{i}.py", filler(300)) for i in range(8)])
    out = plan(msgs, 1500)
    history = [it for it in out.report.items if it.tag == "agent history"]
    assert history and not any(it.action == "truncate" for it in history)
    assert out.tokens_after <= out.budget and paired(out.body["messages"])


def test_lone_messages_of_an_agent_history_rank_after_matching_exchanges() -> None:
    """A malformed reply that names a file ranks after the exchange that holds the file."""
    msgs = run([("grep -rn parse_header src", "src/http/headers.py " + filler(200, "code"))])
    for r in range(3):  # format reminders: with keep_recent 0 their turns are older history
        msgs.append({"role": "assistant", "content": "src/http/headers.py " + filler(200, f"m{r}")})
        msgs.append({"role": "user", "content": "Please use exactly one bash block."})
    for i in range(1, 4):
        msgs += [call(i, "sed -n 1,9p src/http/headers.py"), result(i, "ok")]
    policy = Policy(
        budget=BudgetPolicy(ratio=1.0),
        history=HistoryPolicy(keep_recent=0),
        tools=ToolsPolicy(clear=False),  # the order alone
        cache=CachePolicy(enabled=False),
    )
    out = plan(msgs, 700, policy)
    fwd = {m.get("tool_call_id"): m["content"] for m in out.body["messages"] if "tool_call_id" in m}
    assert fwd.get("c0", "").startswith("src/http/headers.py code0")
    # The reply beside it that only names the file gives way: its placeholder stays (the
    # setup is never sent without its answer), the exchange that holds the file is whole.
    replies = [m["content"] for m in out.body["messages"] if m["role"] == "assistant"]
    assert without_ids(replies[1]).startswith("[context-proxy: reply of 205 tokens omitted]")
    assert out.tokens_after <= out.budget and paired(out.body["messages"])
