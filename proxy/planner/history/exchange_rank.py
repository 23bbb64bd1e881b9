"""Exchange rank: an agent's older exchanges in keep order, by what they hold per token.

An exchange is worth the strings of the newest commands its results hold (paths,
identifiers, lines: command_keys.command_keys), plus a share of its BM25 score against
them; the budget keeps exchanges by that worth per token (a knapsack's greedy order):
evidence counts per result, so two small results holding what the commands name beat one
large one filling the same room. On the 20 agent runs at 16k (results the next command
repeats): most strings first 0.628 of that evidence kept; per token 0.697 (a BM25 weight
of 1/10: 0.689, 1/5: 0.696, 1/2: 0.696; per square root of the tokens: 0.670).
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.planner.history.command_keys import command_keys
from proxy.relevance import TermIndex, score_history

SCORE_WEIGHT = 1 / 3  # a BM25 point against a command string held


def agent_worth(
    texts: Sequence[str],
    costs: Sequence[int],
    commands: str,
    context: str,
    index: TermIndex | None,
) -> list[float]:
    """What each of `texts` (results, of `costs` tokens) is worth per token to an agent
    whose newest `commands` (and reasoning, `context`) these are; 0 for nothing in common."""
    keys = command_keys(commands)
    hits = [sum(k in t for k in keys) for t in texts] if keys else [0] * len(texts)
    # No spread to neighbours and no feedback terms: a file read next to the one the agent
    # works on is not evidence of it.
    scores = score_history(commands, texts, (), context=context, index=index, feedback=0.0)
    return [(h + s * SCORE_WEIGHT) / max(c, 1) for h, s, c in zip(hits, scores, costs, strict=True)]


def agent_rank(
    texts: Sequence[str],
    positions: Sequence[int],
    costs: Sequence[int],
    commands: str,
    context: str,
    index: TermIndex | None,
) -> list[int]:
    """Indexes of `texts` (an agent's older exchanges' results, at `positions`, of `costs`
    tokens) in keep order: the most worth per token first, ties the newest first."""
    newest_first = sorted(range(len(texts)), key=positions.__getitem__, reverse=True)
    worth = agent_worth(texts, costs, commands, context, index)
    return sorted(newest_first, key=lambda i: -worth[i])
