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
    "default/500": "78c63719d9762f67",
    "default/1000": "33cb0a161aa1fc1d",
    "default/2000": "56dba24df922d1ae",
    "default/4000": "063f74355c9bd853",
    "default/8000": "b9769bf3315daeba",
    "default/100000": "17371094f4679171",
    "recency/500": "78c63719d9762f67",
    "recency/1000": "33cb0a161aa1fc1d",
    "recency/2000": "c79b1ac041ea7930",
    "recency/4000": "1cc94f3f78e6ba7f",
    "recency/8000": "fbb81b0e96fa0edc",
    "recency/100000": "17371094f4679171",
    "report/500": "78c63719d9762f67",
    "report/1000": "33cb0a161aa1fc1d",
    "report/2000": "1e5b457f250d3acd",
    "report/4000": "9aea3ac0817151e3",
    "report/8000": "3840feb6f12e220d",
    "report/100000": "d6e316185872e129",
    "truncate/500": "2474266f66b2b24c",
    "truncate/1000": "1c920339fdc567fd",
    "truncate/2000": "56dba24df922d1ae",
    "truncate/4000": "063f74355c9bd853",
    "truncate/8000": "b9769bf3315daeba",
    "truncate/100000": "17371094f4679171",
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
