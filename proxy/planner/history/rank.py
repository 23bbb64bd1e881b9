"""History rank: one keep order for every kind of history, by what the request is doing now.

Turns of a chat, tool exchanges and a text agent's steps are all units, ranked the same
way against what the request is doing now (`Now`: the newest user turn's words, the
newest actions, and the turns around them). A unit is worth:

- the specific strings it holds that the request names now: the paths, identifiers and
  lines of the newest commands, and the ids (a run of letters and digits holding a digit:
  a reservation, an order, a version) of the newest user turn and actions;
- for a unit with results, the ids of them that the conversation went on to use (a result
  whose ids came back later holds the state the next step works on: a user's profile, a
  reservation's details, the search a booking was made from), up to REUSE_CAP;
- SCORE_WEIGHT times its BM25 score against the newest words (relevance/scoring.py);

per square root of its tokens: a knapsack's greedy order, tempered. Evidence counts per
unit, so the budget holds more of it in short units, but a long unit that matches much
better still comes first. Measured per request (bench_quality.py, evidence recall; the
previous orders: BM25 by score for a chat, worth per token for an agent's results):
RealMem at 16k / 32k 0.577 / 0.694 -> 0.789 / 0.881 (its evidence is mostly the user's
short turns, which score below the assistant's long ones); tau-airline at 2,800 / 3,500
0.312 / 0.437 -> 0.468 / 0.608 (with the reuse of ids and the high turns' cap, choices.py);
the agent runs at 16k 0.678 -> 0.728; text agents 0.863 -> 0.858; LoCoMo at 4k 0.855 ->
0.827 (per token it falls to 0.784, by score alone RealMem stays at 0.577).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass

from proxy.planner.history.command_keys import command_keys
from proxy.relevance import TermIndex, ids_in, score_history

SCORE_WEIGHT = 1 / 3  # a BM25 point against a string held
REUSE_CAP = 3  # ids of a result used again later that count
MAX_KEYS = 64


@dataclass(frozen=True, slots=True)
class Now:
    """What the request is doing now."""

    asked: str  # the newest user turn's words
    actions: str  # the newest actions: the current turn's tool calls, a text agent's commands
    context: str  # the rest of the current turn and the newest turns before it
    loop: bool  # an agent's loop (its history holds exchanges): results first, plain BM25


def keys_of(now: Now) -> tuple[list[str], frozenset[str]]:
    """The strings the request names now (see the module's docstring): those of its
    commands, looked for as they are, and its ids, looked up among each unit's ids."""
    commands = command_keys(now.actions)[:MAX_KEYS] if now.actions.strip() else []
    # Not the context's ids: a unit there would name itself (the newest turns are ranked
    # too when they do not all fit, older_order.cap_recent), and taking them in changed no
    # data set's recall by more than 0.003.
    named = sorted(ids_in(f"{now.asked}\n{now.actions}").difference(commands))
    return commands, frozenset(named[:MAX_KEYS])


def worth(
    texts: Sequence[str],
    costs: Sequence[int],
    reused: Sequence[int],
    now: Now,
    index: TermIndex | None,
    scores: Sequence[float] | None = None,
) -> list[float]:
    """What each unit (its text, its tokens, its results' ids used later) is worth now;
    `scores`: the units' BM25 scores, when made already (else made here)."""
    return per_token(merits(texts, reused, now, index, scores), costs)


def per_token(merit: Sequence[float], costs: Sequence[int]) -> list[float]:
    """Each unit's merit per square root of its tokens: what it is worth now."""
    return [m / math.sqrt(max(c, 1)) for m, c in zip(merit, costs, strict=True)]


def merits(
    texts: Sequence[str],
    reused: Sequence[int],
    now: Now,
    index: TermIndex | None,
    scores: Sequence[float] | None = None,
) -> list[float]:
    """What each unit holds that the request needs now, whatever it costs: the strings it
    names, its ids used later, a share of its BM25 score."""
    index = index if index is not None else TermIndex()
    commands, named = keys_of(now)
    hits = [sum(k in t for k in commands) for t in texts] if commands else [0] * len(texts)
    if named:
        hits = [h + len(named & index.ids(t)) for h, t in zip(hits, texts, strict=True)]
    if scores is None and now.loop:  # an agent's loop: its commands the query, its task context
        # No spread to neighbours and no feedback terms: a file read next to the one the
        # agent works on is not evidence of it.
        scores = score_history(
            now.actions, texts, (), context=f"{now.asked}\n{now.context}", index=index,
            feedback=0.0,
        )  # fmt: skip
    elif scores is None:
        query = f"{now.asked}\n{now.actions}" if now.actions else now.asked
        scores = score_history(query, texts, context=now.context, index=index)
    return [h + r + SCORE_WEIGHT * s for h, r, s in zip(hits, reused, scores, strict=True)]


def keep_order(values: Sequence[float], positions: Sequence[int], neighbors: int = 0) -> list[int]:
    """The units (indexes) in keep order: the most worth first (ties: the newer first),
    each followed by up to `neighbors` units on either side of it (nearest first, the older
    first); those worth nothing follow, newest first."""
    n = len(values)
    if all(map(operator.lt, positions, positions[1:])):
        newest_first = list(range(n - 1, -1, -1))  # the usual case: given oldest first
    else:  # sorts are stable, also with reverse=True: equal positions keep their order
        newest_first = sorted(range(n), key=positions.__getitem__, reverse=True)
    scored = [i for i in newest_first if values[i] > 0.0]
    scored.sort(key=values.__getitem__, reverse=True)  # ties: newer first, as listed
    if not neighbors:
        seen = set(scored)
        return scored + [c for c in newest_first if c not in seen] if seen else newest_first
    by_position = newest_first[::-1]
    if len(set(positions)) != n:  # ties: ascending order, given order kept
        by_position = sorted(range(n), key=positions.__getitem__)
    slot = [0] * n
    for k, c in enumerate(by_position):
        slot[c] = k
    taken = [False] * n
    sequence: list[int] = []
    for c in scored:  # each followed by its neighbours, nearest first, the older first
        k = slot[c]
        if not taken[c]:
            taken[c] = True
            sequence.append(c)
        for step in range(1, neighbors + 1):
            for j in (k - step, k + step):
                if 0 <= j < n and not taken[member := by_position[j]]:
                    taken[member] = True
                    sequence.append(member)
    if not sequence:
        return newest_first
    return sequence + [c for c in newest_first if not taken[c]]
