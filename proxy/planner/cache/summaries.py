"""Cache summaries: proxy-made summaries of what a stable cut dropped, placed where it was.

A summary sits just before the first turn the cut kept, where the span it covers was.
Once placed it stays put: summaries are taken oldest span first while they fit their
section's share of the budget, so a new one only ever joins after those already placed
(the prompt up to them stays cached) and none is ever taken out again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.planner.cache.stable_cut import History, cut_index
from proxy.planner.parts import SUMMARY_PREFIX, ExtraSummary, section_policy
from proxy.policy import Policy
from proxy.types import Section, Tokenizer


@dataclass(frozen=True, slots=True)
class Placed:
    summary: ExtraSummary
    message: dict[str, Any]
    cost: int


def offered(
    extra: Sequence[ExtraSummary], tokenizer: Tokenizer, policy: Policy, budget: int
) -> tuple[list[Placed], int]:
    """The usable summaries, oldest span first, with their cost; and their share's cap."""
    out: list[Placed] = []
    for s in sorted(extra, key=lambda s: (s.start, s.end, s.key)):
        if 0 <= s.start < s.end and s.text:
            message = {"role": "system", "content": SUMMARY_PREFIX + s.text}
            out.append(Placed(s, message, tokenizer.count_message(message)))
    ratio = section_policy(policy, Section.CONVERSATION_SUMMARY).ratio
    return out, math.floor(ratio * budget)


def cut_with_summaries(
    history: History, room: int, step: int, offers: Sequence[Placed], cap: int, end: int
) -> tuple[int, list[Placed]]:
    """The cut (units dropped) and the summaries placed: those covering only dropped
    messages, a run from the oldest while they fit `cap`, and the history kept within
    `room` less their cost. `end`: where the history ends (the current turn's start)."""
    n = cut_index(history.cost, room, step)
    while True:
        placed = _placed(history, n, offers, cap, end)
        used = sum(p.cost for p in placed)
        again = cut_index(history.cost, room - used, step)
        if again == n:  # more summaries only ever push the cut further: this settles
            return n, placed
        n = again


def _placed(history: History, n: int, offers: Sequence[Placed], cap: int, end: int) -> list[Placed]:
    boundary = history.units[n][0] if n < len(history.units) else end
    out: list[Placed] = []
    used = 0
    for p in offers:
        if p.summary.end > boundary:
            break  # covers a kept turn (spans come oldest first)
        if used + p.cost > cap:
            break  # a run from the oldest: a later one never displaces a placed one
        out.append(p)
        used += p.cost
    return out
