"""Cuts: how far an item can be cut, and the decision that cuts it — one rule for every plan."""

from __future__ import annotations

from proxy.planner.budget.grants import MIN_KEPT_TOKENS
from proxy.planner.history import shows_file_text, whole_lines
from proxy.planner.parts import Action, Decision, cut_marker
from proxy.types import Tokenizer


def cut_floor(tokenizer: Tokenizer, text: str, cost: int, marker: int) -> int:
    """The least a choice of `cost` tokens can be cut to by shortening `text` (which keeps
    MIN_KEPT_TOKENS and gains the marker); `cost` when it cannot be cut at all."""
    room = tokenizer.count_text(text) - MIN_KEPT_TOKENS - marker
    return cost - room if room > 0 else cost


def cut_decision(
    tokenizer: Tokenizer, text: str, size: tuple[int, int], marker: int, recall: str
) -> Decision:
    """An item of `cost` tokens (its `text` and what frames it) cut to `mine` tokens
    (`size`): the text shortened to what is left after the framing and the marker, and the
    marker (with the `recall` id of what was cut) added."""
    cost, mine = size
    framing = cost - tokenizer.count_text(text)
    kept = tokenizer.truncate_text(text, max(0, mine - framing - marker))
    if shows_file_text(text):  # a file's text: its head in whole lines, no line cut in two
        kept = whole_lines(kept)
    why = f"cut to {mine:,} of {cost:,} tokens"
    return Decision(Action.TRUNCATE, why, kept + cut_marker(recall), mine)
