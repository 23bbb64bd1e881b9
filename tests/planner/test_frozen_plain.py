"""The planner plans plain chat exactly as the old lean path did (tests/planner/frozen_plain).

Random plain conversations under random policies, and a long conversation over several
turns with relevance on: wherever the frozen lean path planned a request, the live planner
forwards the same body with the same counts, problems and report.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.planner.outcome import PlanOutcome
from proxy.planner.request import ExtraSummary, plan_request
from proxy.policy import Policy
from proxy.policy.model import HistoryPolicy
from proxy.relevance import TermIndex
from proxy.types import Tokenizer
from tests.planner.chat_strategies import REAL, VOCAB, WORDS, plain_chats, policies
from tests.planner.frozen_plain.facade import plan_lean

_FIELDS = ("changed", "budget", "context_window", "tokens_before", "tokens_after", "dropped")
_FIELDS += ("truncated", "summarized", "deduped", "trimmed", "problems", "estimated")


def seen(out: PlanOutcome) -> bytes:
    fields: dict[str, Any] = {name: getattr(out, name) for name in _FIELDS}
    fields["body"], fields["report"] = out.body, out.report.to_json()
    return orjson.dumps(fields)


def both(
    body: dict[str, Any],
    policy: Policy,
    tokenizer: Tokenizer,
    window: int,
    extra: list[ExtraSummary],
    terms: tuple[TermIndex, TermIndex] | None = None,
) -> tuple[bytes, bytes] | None:
    """The frozen lean path's outcome and the live planner's, or None where the lean path
    did not plan the request."""
    old_terms, new_terms = terms if terms is not None else (None, None)
    frozen = plan_lean(copy.deepcopy(body), policy, tokenizer, window, extra, old_terms)
    if frozen is None:
        return None
    live = plan_request(
        copy.deepcopy(body), policy, tokenizer, window, extra_summaries=extra, terms=new_terms
    )
    return seen(frozen), seen(live)


@settings(
    max_examples=300,
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
def test_planner_plans_plain_chat_as_the_frozen_lean_path(
    msgs: list[dict[str, Any]],
    policy: Policy,
    window: int,
    real: bool,
    span: tuple[int, ...],
    tools: bool,
) -> None:
    body: dict[str, Any] = {"model": "m", "messages": msgs}
    if tools:
        body["tools"] = [{"type": "function", "function": {"name": "f"}}]
    extra = [ExtraSummary(*span, "a summary")] if span else []
    found = both(body, policy, REAL if real else WORDS, window, extra)
    if found is not None:
        assert found[1] == found[0]


def _turn(rng: random.Random, i: int) -> dict[str, Any]:
    words = " ".join(rng.choice(VOCAB) for _ in range(rng.randint(5, 120)))
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"{i}: {words}"}


def test_long_chat_over_turns_as_the_frozen_lean_path() -> None:
    """A long chat planned turn after turn, relevance on, each side keeping its own term
    index as the server does: every turn the frozen path plans, forwarded alike."""
    rng = random.Random(7)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
    msgs += [_turn(rng, i) for i in range(300)]
    terms = (TermIndex(), TermIndex())
    planned = 0
    for turn in range(4):
        msgs += [_turn(rng, 300 + 2 * turn), _turn(rng, 301 + 2 * turn)]
        for policy in (Policy(), Policy(history=HistoryPolicy(relevance="off", keep_recent=1))):
            found = both({"model": "m", "messages": msgs}, policy, REAL, 6000, [], terms)
            assert found is not None  # plain chat over budget: the lean path's own case
            assert found[1] == found[0]
            planned += 1
    assert planned == 8


def test_frozen_lean_path_plans_random_plain_chat() -> None:
    """The frozen path does plan a good share of the random cases (else the property test
    above would compare nothing)."""
    planned = 0

    @settings(max_examples=120, deadline=None, database=None, derandomize=True)
    @given(plain_chats(), policies, st.integers(10, 1500))
    def count(msgs: list[dict[str, Any]], policy: Policy, window: int) -> None:
        nonlocal planned
        if both({"model": "m", "messages": msgs}, policy, WORDS, window, []) is not None:
            planned += 1

    count()
    assert planned >= 20
