"""The forwarded bodies of the example conversation stay what they were (pinned digests).

examples/agent_session.json (x_context, inline blocks, tool groups) planned under four
policies and six windows: the forwarded body, the counts, the problems and the report of
each case are pinned by digest, so a change in how the planner is built that changes what
goes upstream shows which case moved. A deliberate change of behaviour updates the digests
(run this file as a script to print them).
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.errors import ContextLengthExceeded
from proxy.planner.request import plan_request
from proxy.policy.model import (
    BudgetPolicy,
    CachePolicy,
    HistoryPolicy,
    Policy,
    VisibilityPolicy,
)
from proxy.tokens.counter import TokenCounter

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_session.json"
OFF = CachePolicy(enabled=False)  # the per-request planner, as the digests were taken
POLICIES = {
    "default": Policy(cache=OFF),
    "recency": Policy(history=HistoryPolicy(relevance="off"), cache=OFF),
    "report": Policy(visibility=VisibilityPolicy(prompt_report=True), cache=OFF),
    "truncate": Policy(budget=BudgetPolicy(on_required_overflow="truncate"), cache=OFF),
}
WINDOWS = (500, 1000, 2000, 4000, 8000, 100_000)
PINNED = {
    "default/500": "d2c1a8ed7e5c7e8a",
    "default/1000": "36875ff127da14db",
    "default/2000": "184d99b9fea1d325",
    "default/4000": "64e8a5bdb9a2912d",
    "default/8000": "58ccb0da60413677",
    "default/100000": "ac39c6ce502f3554",
    "recency/500": "d2c1a8ed7e5c7e8a",
    "recency/1000": "36875ff127da14db",
    "recency/2000": "693193d30202015f",
    "recency/4000": "4c0ef7d5c8bcb551",
    "recency/8000": "fa191573eb803b6b",
    "recency/100000": "ac39c6ce502f3554",
    "report/500": "d2c1a8ed7e5c7e8a",
    "report/1000": "36875ff127da14db",
    "report/2000": "92b0e90a7ea8e2b4",
    "report/4000": "d51597acafc61eb7",
    "report/8000": "1fd58db155068645",
    "report/100000": "229ff9bbf84a2480",
    "truncate/500": "bff5b4e2553615b4",
    "truncate/1000": "efd159d1edfbe702",
    "truncate/2000": "184d99b9fea1d325",
    "truncate/4000": "64e8a5bdb9a2912d",
    "truncate/8000": "58ccb0da60413677",
    "truncate/100000": "ac39c6ce502f3554",
}


def digest(name: str, window: int) -> str:
    body: dict[str, Any] = orjson.loads(EXAMPLE.read_bytes())
    policy = POLICIES[name]
    tokenizer = TokenCounter().for_model(str(body["model"]), policy)
    try:
        out = plan_request(copy.deepcopy(body), policy, tokenizer, window)
    except ContextLengthExceeded as exc:
        seen: Any = {"error": exc.message}
    else:
        seen = {
            "body": out.body,
            "changed": out.changed,
            "tokens": [out.tokens_before, out.tokens_after],
            "counts": [out.dropped, out.truncated, out.summarized, out.deduped, out.trimmed],
            "problems": out.problems,
            "report": out.report.to_json(),
        }
    return hashlib.sha256(orjson.dumps(seen, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_example_forwarded_as_pinned(name: str, window: int) -> None:
    assert digest(name, window) == PINNED[f"{name}/{window}"]


if __name__ == "__main__":
    for name in sorted(POLICIES):
        for window in WINDOWS:
            print(f'    "{name}/{window}": "{digest(name, window)}",')
