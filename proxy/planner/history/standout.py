"""Standout: how clearly the current turn points at something in the cut-off past.

Most turns of a conversation carry on from its newest part; a question about the past
names something said long ago, and relevance then finds one turn (or a few) there that
stands out from the rest of the history. The need is that standout: the best cut-off
turn's score in standard deviations above the mean score of the whole history (a
z-score). Broad chatter that matches many turns a little scores low, however much of the
history was cut; a specific reference to one old turn scores high. It is weighed down for a
turn that asks nothing (STATEMENT_WEIGHT) and for one that answers the message just before
it (carrying_on): a reply ("Did you make that?" after a photo of a cake) can still name an
old topic precisely, and a question about the distant past rarely follows on from the
newest message.

Measured on LoCoMo at a 4k budget (bench_cache.py: 2,401 replayed turns against all 1,536
questions asked at the end), the standout alone tells the questions from the replayed
turns with an AUC of 0.93 (the same on plain BM25 without the neighbour spread or speaker
weights, so it is not a property of those), 0.980 with the statement weight, 0.988 with
both weights; at the level that 97% of the questions reach, 12.4% of the replayed turns
without the carrying-on weight, 6.0% with it. So the recall's tokens, which are never
cached, go to the requests that need them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from proxy.planner.history.recall import SPEAKER_LABEL

# The best scored share of the history left out of the mean and spread: a question about
# several old turns (or one whose neighbours share its score) would otherwise raise the
# spread with its own matches and stand out less than a question about one. (LoCoMo at
# 4k: AUC 0.907 with every unit in the statistics, 0.927 without the top 10%.)
_TOP = 0.1
# A turn that asks nothing ("Lucky you! They're priceless.") rarely needs a fact from long
# ago even when a phrase of it matches an old turn well; its standout counts this much.
# LoCoMo at 4k, at the same question recall (0.75): 82% of trimmed prompts cached with
# every turn weighed alike, 90% with statements at 0.3-0.5; with the floor lowered to
# spend that on the questions, recall 0.84 at 81% cached (0 and 0.3 alike).
STATEMENT_WEIGHT = 0.3
# A question mark (Latin, full-width, Spanish, Arabic), or a request to bring something
# back that is worded without one ("Remind me what we said about the lease.").
_ASKS = re.compile(
    r"[?\uff1f\u00bf\u061f]|^\W*(?:what|when|where|who|whom|whose|which|why|how|remind|"
    r"recall|tell me|list|summari[sz]e|repeat|show me)\b",
    re.IGNORECASE,
)


def asks(text: str) -> bool:
    """Whether the turn asks something: a question mark, or a question or request word
    first."""
    return _ASKS.search(text) is not None


def without_own_label(text: str) -> str:
    """The turn's text without the speaker label it starts with ("Evan: ..."), if any: the
    turn's own speaker is not a name it mentions (relevance lifts the turns of a speaker
    the query names, which for a transcript turn would be all of its speaker's own)."""
    found = SPEAKER_LABEL.match(text)
    return text[found.end() :] if found else text


def recall_need(scores: Sequence[float], cut: Sequence[bool]) -> float:
    """The standout (a z-score, 0 or more) of the best scored cut-off unit against the
    bulk of the history units' `scores` (all but the best _TOP of them); 0 when nothing
    was cut or nothing stands out, infinite when the bulk is all alike and it is above."""
    if len(scores) < 2 or not any(cut):
        return 0.0
    values = np.asarray(scores, dtype=np.float64)
    best = float(values[np.asarray(cut, dtype=bool)].max())
    bulk = np.sort(values)[: max(2, math.ceil(len(values) * (1.0 - _TOP)))]
    above = best - float(bulk.mean())
    if above <= 0.0:
        return 0.0
    spread = float(bulk.std())
    return above / spread if spread > 0.0 else math.inf  # one match, all else alike


# How the recall grows from the floor to the full share: as the 4th power of the way
# there. A turn whose need is middling is far more often chatter that names an old topic
# than a question about it (LoCoMo at 4k: 9% of the replayed turns above 4, 99% of the
# questions; 3% above 6.5, 92%), and a question needs most of the budget to bring its
# evidence back (recall 0.78 / 0.82 / 0.84 / 0.87 with 0.3 / 0.5 / 0.7 / 1.0 of it): so
# the tokens go to the clear cases, little to the middling ones. Measured there
# (bench_cache.py, all questions), at recall 0.853-0.854: trimmed prompt tokens cached
# 82.4% with a linear ramp (floor / full 3 / 8), 82.0% with the square (2 / 7), 83.4% with
# the fourth power (2 / 6.5).
RAMP_POWER = 4


def carrying_on(scores: Sequence[float]) -> float:
    """How much the turn carries on from the message just before it: the newest history
    unit's relevance over the best unit's (0 to 1; 0 with no history or nothing relevant).
    The need is weighed by one minus this: a turn that matches the message it answers as
    well as anything in the history is about what is in view."""
    if not scores:
        return 0.0
    best = max(scores)
    return min(1.0, max(0.0, scores[-1] / best)) if best > 0.0 else 0.0


def recall_size(need: float, floor: float, full: float, cap: int) -> int:
    """Tokens for the recall message: none at or below the need `floor`, rising as the
    RAMP_POWER-th power of the way from `floor` to `full`, and `cap` at `full` and past."""
    if need <= floor:
        return 0
    if need >= full or full <= floor:
        return cap
    return math.floor(cap * ((need - floor) / (full - floor)) ** RAMP_POWER)
