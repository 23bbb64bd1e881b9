"""Agent overflow: the protected newest tool exchanges alone exceed the budget -> fewer of them.

The newest `tools.keep_recent` exchanges are protected by the proxy, not by the client: when
they, the task and the system prompt exceed the budget, the older protected exchanges go
whole (calls and results stay paired), oldest first, down to the newest one; if that alone
is still too big, with `on_required_overflow: truncate` its largest result keeps its head and
tail around a marker (a file's text: its head, in whole lines); with `reject` the request is
refused, naming the newest exchange.
"""

from __future__ import annotations

from collections.abc import Callable

from proxy.planner.history import shows_file_text, whole_lines
from proxy.planner.parts import MESSAGE, Action, Decision, Kind, Layout, cut_marker
from proxy.types import Priority, Tokenizer

_TOOL_ROLES = ("tool", "function")
MIN_SIDE = 16  # tokens each side of the middle marker keeps at least: less is no excerpt
HEAD_SHARE = 0.5  # of what a cut result keeps: its head (the command's start) ...


def middle_mark(tokens: int) -> str:
    return f"\n[…{tokens:,} tokens cut…]\n"


def head_and_tail(
    tokenizer: Tokenizer,
    text: str,
    keep: int,
    mark: Callable[[int], str],
    end: str,
) -> str:
    """`text` cut to about `keep` tokens: its head and its tail around a middle marker
    (`mark` of the tokens cut), then `end`."""
    head = tokenizer.truncate_text(text, int(keep * HEAD_SHARE))
    want = keep - tokenizer.count_text(head)
    lo, hi = 0, len(text) - len(head)  # the longest suffix within `want` tokens
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tokenizer.count_text(text[len(text) - mid :]) <= want:
            lo = mid
        else:
            hi = mid - 1
    tail = text[len(text) - lo :] if lo else ""
    cut = tokenizer.count_text(text) - tokenizer.count_text(head) - tokenizer.count_text(tail)
    return head + mark(max(cut, 0)) + tail + end


def agent_overflow(
    layout: Layout, tokenizer: Tokenizer, required: list[int], excess: int, cut: bool
) -> dict[int, Decision] | None:
    """Decisions fitting `required` items (keys) `excess` tokens over the budget by dropping
    the older protected tool exchanges and, if `cut`, cutting the newest one's largest
    result; None when there is no protected exchange, or what is left is still over."""
    msg, units, unit_of, cost = layout.msg, layout.units, layout.unit_of, layout.cost
    exchanges: dict[int, list[int]] = {}  # unit -> its required keys, oldest unit first
    for k in sorted(required, key=msg.__getitem__):
        u = unit_of[msg[k]]
        if len(units[u]) > 1 and layout.in_current(msg[k]):
            exchanges.setdefault(u, []).append(k)
    if not exchanges:
        return None
    order = sorted(exchanges, key=lambda u: units[u][0])
    dropped: set[int] = set()
    left = excess
    for u in order[:-1]:  # the newest one stays
        if left <= 0:
            break
        dropped.update(exchanges[u])
        left -= sum(cost[k] for k in exchanges[u])
    cuts: dict[int, Decision] = {}
    if left > 0 and not cut:
        return None  # the newest exchange is the client's to shorten (reject)
    if left > 0:
        text, role = layout.text, layout.role
        results = [
            k
            for k in exchanges[order[-1]]
            if role[k] in _TOOL_ROLES and layout.kind[k] is Kind.MESSAGE and text[k]
        ]
        if not results:
            return None
        key = max(results, key=lambda k: (cost[k], -k))
        tokens = tokenizer.count_text(text[key])
        end = cut_marker(layout.recall_id(MESSAGE, layout.msg[key]))
        keep = tokens - left - tokenizer.count_text(middle_mark(tokens) + end)
        # A file's text keeps one run of whole lines, its head: a head and a tail would be
        # two scattered pieces of the file the next edit quotes.
        file = shows_file_text(text[key])
        while keep >= 2 * MIN_SIDE:
            if file:
                new = whole_lines(tokenizer.truncate_text(text[key], keep)) + end
            else:
                new = head_and_tail(tokenizer, text[key], keep, middle_mark, end)
            after = cost[key] - tokens + tokenizer.count_text(new)
            short = left - (cost[key] - after)  # tokens still over after this cut
            if short <= 0:
                why = "protected result over the budget: head and tail kept"
                cuts[key] = Decision(Action.TRUNCATE, why, new, after)
                break
            keep -= short
        else:
            return None
    decisions: dict[int, Decision] = {}
    for k, p in enumerate(layout.priority):
        if k in cuts:
            decisions[k] = cuts[k]
        elif p is not Priority.REQUIRED:
            decisions[k] = Decision(Action.DROP, "no room: the newest exchanges fill the budget")
        elif k in dropped:
            decisions[k] = Decision(Action.DROP, "no room: a protected exchange, older")
        else:
            decisions[k] = Decision(Action.KEEP, "required", tokens=cost[k])
    return decisions
