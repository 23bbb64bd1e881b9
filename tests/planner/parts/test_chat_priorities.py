"""Plain chat's priorities from the user messages' positions equal the per-turn reference."""

from __future__ import annotations

import random

from proxy.planner.parts.sections import _chat_priorities
from proxy.policy.model import HistoryPolicy, Policy
from proxy.types import Priority


def _reference(roles: list[str], keep_recent: int) -> tuple[int, list[Priority]]:
    """sections._priorities as it reads turn numbers per message (groups.shape)."""
    n = len(roles)
    turn_of, turn = [], 0
    for role in roles:
        turn += role == "user"
        turn_of.append(turn)
    users = [i for i, r in enumerate(roles) if r == "user"]
    start = users[-1] if users else max(n - 1, 0)
    recent_from = turn - keep_recent
    first = next((i for i in range(start) if turn_of[i] >= recent_from), start)
    return start, (
        [Priority.LOW] * first
        + [Priority.HIGH] * (start - first)
        + [Priority.REQUIRED] * (n - start)
    )


def test_chat_priorities_match_the_per_turn_reference() -> None:
    rng = random.Random(17)
    for _ in range(3000):
        roles = [rng.choice(("user", "assistant", "system")) for _ in range(rng.randint(0, 14))]
        keep = rng.randint(0, 8)
        policy = Policy(history=HistoryPolicy(keep_recent=keep))
        assert _chat_priorities(roles, policy) == _reference(roles, keep), (roles, keep)
