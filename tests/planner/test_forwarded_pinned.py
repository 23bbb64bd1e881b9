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
    "default/500": "7146ce9b24f8c68f",
    "default/1000": "ffdf055a800968bc",
    "default/2000": "383867060d44bc54",
    "default/4000": "3b8cd34f06729011",
    "default/8000": "03a7a87b240469f6",
    "default/100000": "ac39c6ce502f3554",
    "recency/500": "7146ce9b24f8c68f",
    "recency/1000": "ffdf055a800968bc",
    "recency/2000": "d09d60a41b0fa1df",
    "recency/4000": "ca2842c850718fc2",
    "recency/8000": "3744e9efdf06afd8",
    "recency/100000": "ac39c6ce502f3554",
    "report/500": "7146ce9b24f8c68f",
    "report/1000": "ffdf055a800968bc",
    "report/2000": "da6ea5f0262f98ba",
    "report/4000": "ef30231d9374257a",
    "report/8000": "110fcacd96d555de",
    "report/100000": "229ff9bbf84a2480",
    "truncate/500": "80beeec9f7818b22",
    "truncate/1000": "0133787737a272a0",
    "truncate/2000": "383867060d44bc54",
    "truncate/4000": "3b8cd34f06729011",
    "truncate/8000": "03a7a87b240469f6",
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
