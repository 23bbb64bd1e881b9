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
    "default/500": "cea67aeb83395fca",
    "default/1000": "8a6535c43117fcca",
    "default/2000": "4b009c247a4164f3",
    "default/4000": "7dc631560401753b",
    "default/8000": "7de59b73a728b49b",
    "default/100000": "2dc290327fd72eeb",
    "recency/500": "cea67aeb83395fca",
    "recency/1000": "5ec7362ff84ebaa8",
    "recency/2000": "4b009c247a4164f3",
    "recency/4000": "7dc631560401753b",
    "recency/8000": "7de59b73a728b49b",
    "recency/100000": "2dc290327fd72eeb",
    "report/500": "cea67aeb83395fca",
    "report/1000": "fbf8095396f29108",
    "report/2000": "c631c69ea8e90aab",
    "report/4000": "53232ae5a810c0d6",
    "report/8000": "d01768167891992e",
    "report/100000": "980ea1c90dd17590",
    "truncate/500": "a55352ceda4bdc07",
    "truncate/1000": "8a6535c43117fcca",
    "truncate/2000": "4b009c247a4164f3",
    "truncate/4000": "7dc631560401753b",
    "truncate/8000": "7de59b73a728b49b",
    "truncate/100000": "2dc290327fd72eeb",
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
