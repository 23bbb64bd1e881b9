"""Cache mode in an agent loop (planner/cache/agent.py): planned as of the last step boundary, the
steps since appended, old results the newest commands name recalled at the end. (The
property that every agent request fits, stays paired and keeps its current turn runs in
both modes in test_agents.py.)"""

from __future__ import annotations

import copy
from typing import Any

import orjson

from proxy.planner.cache.agent import is_agent_loop
from proxy.planner.cache.agent_recall import RECALL_TOOLS_HEAD
from proxy.planner.cache.stable_cut import boundary
from proxy.planner.parts.sections import build_layout
from proxy.planner.request import plan_request
from proxy.policy.model import BudgetPolicy, CachePolicy, Policy
from tests.planner.budget.test_agents import WORDS, call, filler, paired, result, run


def policy(**cache: Any) -> Policy:
    return Policy(budget=BudgetPolicy(ratio=1.0), cache=CachePolicy(enabled=True, **cache))


def forwarded(msgs: list[dict[str, Any]], window: int, pol: Policy | None = None) -> Any:
    return plan_request({"model": "m", "messages": copy.deepcopy(msgs)}, pol or policy(), WORDS,
                        window)  # fmt: skip


def long_run(steps: int, size: int = 120) -> list[dict[str, Any]]:
    """An agent loop reading a different file each step (f{i}.py), outputs of `size` words."""
    return run(
        [(f"cat src/module_{i}.py", f"file{i} " + filler(size, f"w{i}x")) for i in range(steps)]
    )


def recall_of(out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in out if str(m.get("content")).startswith(RECALL_TOOLS_HEAD)]


def before_recall(out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for i, m in enumerate(out):
        if str(m.get("content")).startswith(RECALL_TOOLS_HEAD):
            return out[:i]
    return out


def test_an_agent_loop_is_told_from_a_chat_with_a_tool_call() -> None:
    loop = long_run(10)
    layout = build_layout(loop, policy())
    assert is_agent_loop(layout, [WORDS.count_message(m) for m in loop])
    chat = [{"role": "user", "content": filler(300)}, call(1, "date"), result(1, "Monday")]
    chat += [{"role": "assistant", "content": filler(300)}, {"role": "user", "content": "ok"}]
    layout = build_layout(chat, policy())
    assert not is_agent_loop(layout, [WORDS.count_message(m) for m in chat])


def test_the_boundary_is_a_unit_start_at_whole_steps() -> None:
    loop = long_run(10)
    layout = build_layout(loop, policy())
    full = [WORDS.count_message(m) for m in loop]
    at = boundary(full, [unit[0] for unit in layout.units], 500)
    assert loop[at]["role"] != "tool"
    assert sum(full[:at]) >= sum(full) // 500 * 500
    assert sum(full[at:]) < 500  # the steps since it: less than one step


def test_over_budget_loop_fits_keeps_pairs_and_the_newest_exchanges() -> None:
    loop = long_run(40)
    out = forwarded(loop, 3000)
    fwd = out.body["messages"]
    assert out.changed and out.tokens_after <= 3000 and paired(fwd)
    for m in loop[-6:]:  # the newest three exchanges, byte for byte
        assert m in fwd
    assert loop[0] in fwd and loop[1] in fwd  # the system prompt and the task
    again = forwarded(loop, 3000)
    assert orjson.dumps(again.body) == orjson.dumps(out.body)  # deterministic


def test_the_next_steps_append_to_the_same_prefix_until_a_boundary() -> None:
    """Replayed step by step, each request's forwarded messages before the recall are the
    start of the next request's, except where the plan moved to a new step boundary."""
    loop = long_run(60, 80)
    window = 3000
    step = window - int(0.7 * window)
    outs, marks = [], []
    for k in range(24, 60):
        msgs = loop[: 2 + 2 * k]
        planned = forwarded(msgs, window)
        if planned.changed:  # trimmed (the first trim of a growing loop changes it anyway)
            outs.append(planned.body["messages"])
            full = [WORDS.count_message(m) for m in msgs]
            marks.append(sum(full) // step)
    kept = moved = 0
    for (a, ka), (b, kb) in zip(
        zip(outs, marks, strict=True), zip(outs[1:], marks[1:], strict=True), strict=False
    ):
        prefix = before_recall(a)
        if b[: len(prefix)] == prefix:
            kept += 1
        else:
            moved += 1
            assert ka != kb  # the prefix changes only when a boundary is crossed
    assert kept > 3 * moved > 0


def referencing_run() -> list[dict[str, Any]]:
    """60 steps, each reading a file whose path its result starts with; the newest command
    reads src/module_005.py again (step 5's result: message 13)."""
    steps = [
        (f"cat src/module_{i:03d}.py", f"src/module_{i:03d}.py: " + filler(120, f"w{i}x"))
        for i in range(60)
    ]
    steps[-1] = ("sed -n 1,80p src/module_005.py", filler(60, "q"))
    return run(steps)


def test_an_old_result_the_newest_command_names_is_recalled_at_the_end() -> None:
    loop = referencing_run()
    old = loop[3 + 2 * 5]  # step 5's result
    out = forwarded(loop, 4000).body["messages"]
    assert old not in before_recall(out)  # the boundary's plan left it out (or cleared it)
    (recall,) = recall_of(out)
    assert recall["role"] == "user"  # recalled text gains no privilege
    assert "\nResult of bash:\n> " + old["content"] in recall["content"]
    assert out[-1] is recall or out[-1] == recall  # after the newest results
    assert paired([m for m in out if m is not recall])


def test_no_recall_when_its_share_is_zero() -> None:
    loop = referencing_run()
    assert recall_of(forwarded(loop, 4000).body["messages"])
    out = forwarded(loop, 4000, policy(agent_recall_share=0.0))
    assert recall_of(out.body["messages"]) == [] and out.tokens_after <= 4000


def test_the_report_numbers_every_message_of_the_request() -> None:
    loop = referencing_run()
    out = forwarded(loop, 4000)
    report = out.report
    assert {it.message for it in report.items} == set(range(len(loop)))
    assert report.tokens_before == out.tokens_before and report.budget == 4000
    assert report.tokens_after == out.tokens_after
    recalls = [it for it in report.items if it.kind == "recall"]
    assert len(recalls) == len(recall_of(out.body["messages"])) == 1
    assert "step boundary" in recalls[0].reason
    assert out.dropped + out.cleared > 0 and out.trimmed >= out.dropped
