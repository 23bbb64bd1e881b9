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
    "default/2000": "319fc4999bee07c0",
    "default/4000": "1f48a84ab643cb9c",
    "default/8000": "f41f81b1ed52c28c",
    "default/100000": "ac39c6ce502f3554",
    "recency/500": "d2c1a8ed7e5c7e8a",
    "recency/1000": "36875ff127da14db",
    "recency/2000": "693193d30202015f",
    "recency/4000": "4c0ef7d5c8bcb551",
    "recency/8000": "fa191573eb803b6b",
    "recency/100000": "ac39c6ce502f3554",
    "report/500": "d2c1a8ed7e5c7e8a",
    "report/1000": "36875ff127da14db",
    "report/2000": "e877c2fcb9d3aa70",
    "report/4000": "d7acf76836d5ba39",
    "report/8000": "680ce1f4fca4a2a2",
    "report/100000": "229ff9bbf84a2480",
    "truncate/500": "bff5b4e2553615b4",
    "truncate/1000": "efd159d1edfbe702",
    "truncate/2000": "319fc4999bee07c0",
    "truncate/4000": "1f48a84ab643cb9c",
    "truncate/8000": "f41f81b1ed52c28c",
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
