"""Clearing: old tool results compacted (JSON without its spaces), cut to an excerpt, or
replaced by a placeholder naming the tool and the tokens removed.

Compaction (compact.py) loses nothing, so every old result that can be compacted is,
before any is cut. The cheapest cut that keeps an agent's trail: the call and its
arguments stay, so the request stays valid and the agent still sees what it did. A record
holding strings that matter (ids the conversation went on to use, strings the newest
commands name) is cut to an excerpt of them (excerpt.py), whatever its relevance; a file's
text never is (history/file_text.py: it stays whole or goes); the others, from the less
relevant share of the old exchanges, to a placeholder. Least
relevant to what the request is doing now first (ties: the oldest first), and only as far
as the caller's target asks (`pick`): today just enough to fit the budget; a caller that
wants to cut in steps passes a lower target. Evidence recall with excerpts (and the newest
turns' room, choices.py): the agent runs at 16k / 32k tokens 0.847 / 0.940 -> 0.864 /
0.945 by default (per request 0.728 / 0.905 -> 0.776 / 0.862: on a larger budget an
excerpt of a relevant result can lose what keeping it whole and dropping less relevant
exchanges kept), text agents 0.903 / 0.981 -> 0.915 / 0.969, tau-airline at 2,800 / 3,500
0.467 / 0.616 -> 0.501 / 0.670; compaction then took tau-airline to 0.554 / 0.719 and
changed no other data set by more than 0.004.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from proxy.planner.budget.compact import compact_json
from proxy.planner.budget.excerpt import excerpt, last_said, strings_to_keep
from proxy.planner.budget.grants import Choices
from proxy.planner.budget.state import PlanState
from proxy.planner.history import keys_of, now_of, shows_file_text, unit_act
from proxy.planner.parts import MESSAGE, Action, Decision, tool_name

_RESULT_ROLES = ("tool", "function")
# Share of the room for optional items that the most relevant old results may keep whole
# when even clearing every result does not fit (a long agent run on a small budget): the
# rest is the trail of cleared calls. Clearing all would keep none of what the agent read.
WHOLE_SHARE = 0.5
# Share of the old tool exchanges, the least relevant, whose results may be cleared; the
# more relevant ones stay whole, or go whole when even the cleared trail does not fit.
# Clearing trades what the agent read for the trail of its calls: on the 20 agent runs at
# a 16k budget (results the next command repeats), clearing any old result just enough to
# fit keeps 0.52 of that evidence (4,718 results cleared over 915 requests), the less
# relevant half 0.59 (102 cleared), no clearing 0.59; keep-newest 0.47.
CLEAR_SHARE = 0.5


CLEARED = "cleared: "  # the reason of a result replaced by a placeholder (not an excerpt)
COMPACTED = "compacted: "  # the reason of a result sent as the same JSON without spaces


def placeholder(name: str, tokens: int, recall: str) -> str:
    return f"[context-proxy: result of {name} cleared, {tokens:,} tokens, recall {recall}]"


@dataclass(frozen=True, slots=True)
class Clearable:
    """An old tool result that may be cleared: what clearing it saves, and its decision."""

    key: int
    saving: int  # tokens the request loses when it is cleared (beyond its compaction)
    decision: Decision

    @property
    def lossless(self) -> bool:
        """Compacted (the same JSON without spaces): nothing cut."""
        return self.decision.action is Action.COMPACT


def may_clear(state: PlanState) -> bool:
    """Whether the request has results clearing may touch (and the policy clears)."""
    return state.policy.tools.clear and len(state.layout.units) != len(state.layout.base)


def clearable(state: PlanState, choices: Choices) -> list[Clearable]:
    """The optional tool results worth clearing, in the order they are cleared: the reverse
    of their tool groups' keep order (relevance to what the agent is doing now, for agent
    history), so what the budget keeps first is cleared last."""
    layout, policy = state.layout, state.policy.tools
    if not may_clear(state):
        return []  # clearing off, or no tool result at all
    count, cost = state.tokenizer.count_text, state.cost
    place = _keep_places(choices)
    groups = sorted(
        (c for c, keys in enumerate(choices.items) if len(keys) > 1), key=place.__getitem__
    )
    less_relevant = set(groups[int(len(groups) * (1 - CLEAR_SHARE)) :])
    said = last_said(layout, state.terms) if groups else {}
    commands = keys_of(now_of(layout))[0] if groups else []
    units = layout.units
    found: list[tuple[tuple[int, int, int], Clearable]] = []
    for c in groups:
        keys = choices.items[c]
        call = layout.stripped[layout.msg[keys[0]]]
        # A file's text is read whole or not at all: the lines an edit will quote are not
        # the ones the newest commands name (Claude Code sessions at 32k: evidence recall
        # per request 0.65 with excerpts of reads, 0.73 without; by default, one run of
        # whole lines around what the newest commands name 0.657, whole or cleared 0.774).
        reads = unit_act(layout, units[layout.unit_of[layout.msg[keys[0]]]]).shows_file
        for key in keys:
            i = layout.msg[key]
            m = layout.stripped[i]
            if (
                layout.roles[i] not in _RESULT_ROLES
                or key != layout.base[i]
                or type(m.get("content")) is not str
                or not m["content"]
                or (i in layout.split and len(layout.split[i].items) > 1)
            ):
                continue
            name = tool_name(m, call)
            tokens = count(layout.text[key])
            if name in policy.exclude or tokens < policy.clear_min_tokens:
                continue
            whole, full = layout.text[key], cost[key]
            # Kept last, cleared first; within a group the oldest result first; every
            # compaction (nothing lost) before any cut.
            place_of = -place[c], key
            packed = compact_json(whole)
            if packed is not None:
                packed_tokens = count(packed)
                after = max(0, full - tokens + packed_tokens)
                if after < full:
                    why = f"{COMPACTED}result of {name}, {tokens:,} tokens, the same JSON"
                    decision = Decision(Action.COMPACT, why, packed, after)
                    found.append(((0, *place_of), Clearable(key, full - after, decision)))
                    whole, full, tokens = packed, after, packed_tokens
            held = state.terms.figures(layout.text[key])  # whitespace aside, the same text
            # A file's text, read from its content (numbered lines, a window, a diff) or its
            # call (a read), is kept whole or cleared: never cut to an excerpt.
            file = reads or shows_file_text(whole)
            strings = [] if file else strings_to_keep(whole, held, i, said, commands)
            recall = layout.recall_id(MESSAGE, i)
            text = excerpt(whole, strings, (name, recall), tokens) if strings else None
            if text is not None:  # any old result: what it holds that matters stays
                why = f"cut: result of {name}, {tokens:,} tokens, to the parts that matter"
            elif c in less_relevant:
                text = placeholder(name, tokens, recall)
                why = f"{CLEARED}result of {name}, {tokens:,} tokens"
            else:
                continue
            after = max(0, full - tokens + count(text))
            if after >= full:
                continue
            decision = Decision(Action.CLEAR, why, text, after)
            found.append(((1, *place_of), Clearable(key, full - after, decision)))
    found.sort(key=lambda t: t[0])
    return [c for _, c in found]


def _keep_places(choices: Choices) -> list[int]:
    """Each choice's place in the budget's keep order (smaller: kept first)."""
    n = len(choices.rank)
    ordered = choices.keep
    if ordered is None:
        ordered = sorted(range(n), key=lambda c: (choices.rank[c], choices.order[c]))
    place = [0] * n
    for p, c in enumerate(ordered):
        place[c] = p
    return place


def pick(order: list[Clearable], need: int, room: int) -> dict[int, Decision]:
    """The first results of `order` that together save at least `need` tokens; the target
    is the caller's. When clearing them all cannot save that much, exchanges will be
    dropped anyway: then the most relevant results stay whole within WHOLE_SHARE of the
    `room` (tokens for every optional item), and the rest are cleared (those least
    relevant then dropped by the budget)."""
    out: dict[int, Decision] = {}
    if need <= 0:
        return out
    # Every compaction, whatever the need: nothing is lost, and the results' bytes stay the
    # same from one step to the next (the provider's prompt cache keeps its prefix).
    for c in order:
        if c.lossless:
            out[c.key] = c.decision
            need -= c.saving
    cuts = [c for c in order if not c.lossless]
    if sum(c.saving for c in cuts) < need:
        whole = room * WHOLE_SHARE
        for c in reversed(cuts):  # the most relevant first
            if c.saving <= whole:
                whole -= c.saving
            else:
                out[c.key] = c.decision
        return out
    for c in cuts:
        if need <= 0:
            break
        out[c.key] = c.decision
        need -= c.saving
    return out


def trails_last(choices: Choices, cleared: Mapping[int, Decision]) -> None:
    """Within each rank, the exchanges kept whole (or cut to an excerpt) come before those
    with a cleared result: when exchanges must be dropped as well, what the agent read
    outlives the trail of calls whose output is gone (the trail takes what room is left,
    in the same order)."""
    if not cleared:
        return
    # Only where the order is relevance (not a run of the newest, which must stay unbroken).
    trail = [
        not run and any(k in cleared and cleared[k].reason.startswith(CLEARED) for k in keys)
        for keys, run in zip(choices.items, choices.contiguous, strict=True)
    ]
    if choices.keep is not None:
        rank, keep = choices.rank, choices.keep
        # keep is sorted by rank: a stable sort on (rank, trail) partitions each rank's run.
        keep.sort(key=lambda c: (rank[c], trail[c]))
        return
    choices.order[:] = [(float(t), *o) for t, o in zip(trail, choices.order, strict=True)]
