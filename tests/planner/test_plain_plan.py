"""The lean path for plain chat (proxy.planner.plain_plan) decides exactly as the general path.

Random untagged conversations (tool groups, results out of place, repeats, system prompts
with and without heading sections, messages without content) under random policies: the
forwarded body, every count, the problems and the whole report must be the same whether
the lean path plans the request or the general path does.
"""

from __future__ import annotations

import copy
from typing import Any
from unittest import mock

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.errors import ContextLengthExceeded
from proxy.planner import request as planning
from proxy.planner.plain_plan import plan_plain
from proxy.planner.request import ExtraSummary, plan_request
from proxy.policy import Policy
from proxy.types import Tokenizer
from tests.planner.chat_strategies import REAL, WORDS, plain_chats, policies


def outcome(
    body: dict[str, Any],
    policy: Policy,
    tokenizer: Tokenizer,
    window: int,
    extra: list[ExtraSummary],
    tools: bool,
) -> bytes:
    if tools:
        body = {**body, "tools": [{"type": "function", "function": {"name": "f"}}]}
    try:
        out = plan_request(copy.deepcopy(body), policy, tokenizer, window, extra_summaries=extra)
    except ContextLengthExceeded as exc:
        return orjson.dumps({"error": str(exc)})
    fields = ("changed", "budget", "tokens_before", "tokens_after", "dropped", "truncated")
    fields += ("summarized", "deduped", "trimmed", "problems", "estimated")
    seen = {name: getattr(out, name) for name in fields}
    seen["body"], seen["report"] = out.body, out.report.to_json()
    return orjson.dumps(seen)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    plain_chats(),
    policies,
    st.integers(10, 1500),
    st.booleans(),
    st.sampled_from([(), (), (), (0, 1), (0, 99)]),
    st.booleans(),
)
def test_lean_path_decides_as_the_general_path(
    msgs: list[dict[str, Any]],
    policy: Policy,
    window: int,
    real: bool,
    span: tuple[int, ...],
    tools: bool,
) -> None:
    tokenizer = REAL if real else WORDS
    extra = [ExtraSummary(*span, "a summary")] if span else []
    body = {"model": "m", "messages": msgs}
    lean = outcome(body, policy, tokenizer, window, extra, tools)
    with mock.patch.object(planning, "plan_plain", lambda *args: None):
        general = outcome(body, policy, tokenizer, window, extra, tools)
    assert lean == general


def test_lean_path_plans_plain_chat() -> None:
    """The lean path does take a plain conversation over budget (else the test above
    would compare the general path with itself)."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
    for i in range(40):
        msgs.append({"role": "user" if i % 2 else "assistant", "content": f"turn {i} " * 20})
    body = {"model": "m", "messages": msgs}
    results: list[object] = []

    def spy(*args: Any) -> object:
        results.append(plan_plain(*args))
        return results[-1]

    with mock.patch.object(planning, "plan_plain", spy):
        out = plan_request(body, Policy(), WORDS, 400)
    assert len(results) == 1 and results[0] is not None
    assert out.dropped > 0 and out.tokens_after <= 320
