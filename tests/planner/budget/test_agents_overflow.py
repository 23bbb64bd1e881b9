"""Agents over the budget on their newest exchanges alone: fewer protected
exchanges, then the newest one's largest result cut head and tail, never a refusal for
what the proxy itself protected."""

from __future__ import annotations

import pytest

from proxy.errors import ContextLengthExceeded
from proxy.planner.budget.agent_overflow import head_and_tail, middle_mark
from proxy.planner.parts.decision import MARKER
from proxy.policy.model import BudgetPolicy, Policy
from tests.planner.budget.test_agents import WORDS, filler, paired, plan, run
from tests.planner_fakes import without_ids

TRUNCATE = Policy(budget=BudgetPolicy(ratio=1.0, on_required_overflow="truncate"))


def test_older_protected_exchanges_go_whole_before_a_refusal() -> None:
    msgs = run([(f"cat f{i}.py", filler(n)) for i, n in enumerate((300, 300, 300))])
    out = plan(msgs, 800)  # refused before: the 3 newest exchanges alone are ~930 tokens
    fwd = out.body["messages"]
    assert out.tokens_after <= out.budget and paired(fwd)
    assert fwd[:2] == msgs[:2]  # system prompt and task
    assert fwd[-2:] == msgs[-2:]  # the newest exchange, byte-identical
    assert msgs[2] not in fwd and msgs[3] not in fwd  # the oldest protected, whole
    assert any("protected tool exchanges over the budget" in p for p in out.problems)


def test_newest_exchange_alone_over_is_still_refused_under_reject() -> None:
    msgs = run([(f"cat f{i}.py", filler(n)) for i, n in enumerate((100, 200, 900))])
    with pytest.raises(ContextLengthExceeded):
        plan(msgs, 800)


def test_truncate_keeps_head_and_tail_of_the_newest_result() -> None:
    msgs = run([(f"cat f{i}.py", filler(n)) for i, n in enumerate((100, 200, 900))])
    out = plan(msgs, 800, TRUNCATE)
    fwd = out.body["messages"]
    assert out.tokens_after <= out.budget and paired(fwd)
    assert fwd[:2] == msgs[:2]  # the system prompt is not cut to a marker any more
    cut = fwd[-1]["content"]
    assert cut.startswith("line0 line1") and without_ids(cut).endswith("line899" + MARKER + "]")
    assert "tokens cut…]" in cut
    assert msgs[2] not in fwd and msgs[4] not in fwd  # older protected exchanges first


def test_head_and_tail_fits_its_target() -> None:
    text = filler(1000)
    cut = head_and_tail(WORDS, text, 100, middle_mark, "\n[…truncated]")
    assert cut.startswith("line0 ") and cut.endswith("line999\n[…truncated]")
    assert WORDS.count_text(cut) <= 100 + 1 + 6


def test_agent_history_kept_by_what_it_holds_per_token() -> None:
    # The newest commands name parser.py and parse_header; an old large result holds both,
    # two small ones one each: the two small ones fill the room better (evidence counts per
    # result), where the most strings first kept the large one alone.
    big = filler(500) + " parser.py parse_header"
    small = [filler(40, "w") + " parser.py", filler(40, "v") + " parse_header"]
    steps = [("cat big.txt", big), ("cat a.txt", small[0]), ("cat b.txt", small[1])]
    steps += [(f"grep parse_header parser.py # {i}", filler(30, "n")) for i in range(3)]
    msgs = run(steps)
    out = plan(msgs, 750)
    fwd = out.body["messages"]
    assert out.tokens_after <= out.budget and paired(fwd)
    assert msgs[5] in fwd and msgs[7] in fwd  # the two small results, whole
    assert msgs[3] not in fwd  # the large one
