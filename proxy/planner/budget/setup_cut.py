"""Setup cut: a setup over half the budget has its largest user parts cut, never dropped.

The setup (every message before the first answer: the operator's instructions, and the
user's task, environment, pasted material) is what the request is for, so it is kept
whole; but a setup that takes more than half of the budget would leave the conversation
or the agent's work no room. Then its largest user parts are cut, token-exact with a
visible marker, until it takes half; the operator's messages are not touched here.
"""

from __future__ import annotations

from proxy.planner.budget.grants import cut_required
from proxy.planner.budget.state import PlanState
from proxy.planner.parts import MESSAGE, Action, Decision, Kind, cut_marker

_CUTTABLE = (Kind.MESSAGE, Kind.BLOCK)
# Tokens a cut user part keeps at least, from its start (the task's first words): cut, not
# dropped, even when the operator's part alone takes half the budget.
MIN_SETUP_PART = 128


def setup_cuts(state: PlanState, required: list[int], budget: int) -> dict[int, Decision]:
    """The decisions cutting the setup's largest user parts down to half of `budget`."""
    layout = state.layout
    end = layout.setup_end
    if not end:
        return {}
    msg, cost = layout.msg, state.cost
    keys = [k for k in required if msg[k] < end]
    excess = sum(cost[k] for k in keys) - budget // 2
    if excess <= 0:
        return {}
    count = state.tokenizer.count_text
    users = [
        (k, count(state.text_of(k)), 0)
        for k in keys
        if layout.role[k] == "user" and layout.kind[k] in _CUTTABLE and state.text_of(k)
    ]
    out: dict[int, Decision] = {}
    sizes = {k: tokens for k, tokens, _ in users}
    for k, want in cut_required(users, excess, state.marker).items():
        take = min(want, sizes[k] - MIN_SETUP_PART)
        if take <= state.marker:
            continue
        text = state.text_of(k)
        kept = state.tokenizer.truncate_text(text, count(text) - take)
        after = cost[k] - take + state.marker
        mark = cut_marker(layout.recall_id(MESSAGE, msg[k]))
        out[k] = Decision(Action.TRUNCATE, "setup over half the budget: cut", kept + mark, after)
    if out:
        layout.problems.append(f"setup over half the budget by {excess:,} tokens: cut")
    return out
