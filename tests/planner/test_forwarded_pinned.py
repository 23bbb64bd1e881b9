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
    "default/500": "e29a5a8cab3ff318",
    "default/1000": "544e5b58ba7b6058",
    "default/2000": "06f0f82e3d681c3a",
    "default/4000": "05423eb0c20b0e69",
    "default/8000": "1733f82c78c0fe7a",
    "default/100000": "ac39c6ce502f3554",
    "recency/500": "e29a5a8cab3ff318",
    "recency/1000": "544e5b58ba7b6058",
    "recency/2000": "30b82341973b6c54",
    "recency/4000": "e09b5489548897fe",
    "recency/8000": "f1ea4c7c998824d6",
    "recency/100000": "ac39c6ce502f3554",
    "report/500": "e29a5a8cab3ff318",
    "report/1000": "544e5b58ba7b6058",
    "report/2000": "12df7f60ad9651a1",
    "report/4000": "d70722dda8004325",
    "report/8000": "0ace1184d5e69760",
    "report/100000": "229ff9bbf84a2480",
    "truncate/500": "ec05db286d6d3ae1",
    "truncate/1000": "49ebefcf64f3f155",
    "truncate/2000": "06f0f82e3d681c3a",
    "truncate/4000": "05423eb0c20b0e69",
    "truncate/8000": "1733f82c78c0fe7a",
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
