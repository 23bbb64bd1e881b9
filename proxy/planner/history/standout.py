"""Standout: how clearly the current turn points at something in the cut-off past.

Most turns of a conversation carry on from its newest part; a question about the past
names something said long ago, and relevance then finds one turn (or a few) there that
stands out from the rest of the history. A turn's standout is its score in standard
deviations above the mean score of the bulk of the history (a z-score); what stands out
of the cut-off past is what cache mode recalls. Broad chatter that matches many turns a
little scores low, however much of the history was cut; a specific reference to one old
turn scores high. It is weighed down for a
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


def standouts(scores: Sequence[float]) -> list[float]:
    """Each unit's standout: its score in standard deviations above the bulk of the
    history's (all but the best _TOP), 0 or more; infinite above a bulk all alike."""
    if len(scores) < 2:
        return [0.0] * len(scores)
    values = np.asarray(scores, dtype=np.float64)
    bulk = np.sort(values)[: max(2, math.ceil(len(values) * (1.0 - _TOP)))]
    above = np.maximum(values - float(bulk.mean()), 0.0)
    spread = float(bulk.std())
    if spread > 0.0:
        return [float(v) for v in above / spread]
    return [math.inf if v > 0.0 else 0.0 for v in above]


def carrying_on(scores: Sequence[float]) -> float:
    """How much the turn carries on from the message just before it: the newest history
    unit's relevance over the best unit's (0 to 1; 0 with no history or nothing relevant).
    The need is weighed by one minus this: a turn that matches the message it answers as
    well as anything in the history is about what is in view."""
    if not scores:
        return 0.0
    best = max(scores)
    return min(1.0, max(0.0, scores[-1] / best)) if best > 0.0 else 0.0
