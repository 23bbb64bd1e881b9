"""Required parts: what a request that cannot fit is made of, named for its 400 error.

An agent's request is mostly its newest tool exchanges; telling it to "shorten the last
message" when a 5,800-token tool result is the problem helps no one. So the message names
the system prompt, the last user message and the newest tool exchanges with their tokens
(and the largest result), and the hint follows the largest of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.planner.parts import Layout, tool_name

_TOOL_ROLES = ("tool", "function")


def describe(
    layout: Layout,
    required: Sequence[int],
    cost: Sequence[int],
    figures: tuple[int, int, int | None, int],
) -> str | None:
    """The error message when the current turn holds tool exchanges, else None (the
    caller's message, by section, fits plain chat). `figures`: (tokens needed, budget,
    context window, request overhead)."""
    total, budget, window, fixed = figures
    units, unit_of = layout.units, layout.unit_of
    system = user = exchanges = other = 0
    largest: tuple[int, int] | None = None  # (tokens, message) of the largest result
    groups: set[int] = set()
    for k in required:
        i = layout.msg[k]
        role = layout.roles[i]
        if role in ("system", "developer"):
            system += cost[k]
        elif not layout.in_current(i):
            other += cost[k]  # tagged required, or of an unknown shape
        elif len(units[unit_of[i]]) > 1:
            exchanges += cost[k]
            groups.add(unit_of[i])
            if role in _TOOL_ROLES and (largest is None or cost[k] > largest[0]):
                largest = (cost[k], i)
        elif role == "user":
            user += cost[k]
        else:
            other += cost[k]
    if not groups:
        return None
    parts = [f"the last user message is {user:,} tokens"]
    if system:
        parts.append(f"the system prompt {system:,}")
    n = len(groups)
    what = f"the {n} newest tool exchange{'s' if n > 1 else ''} {exchanges:,}"
    if largest is not None:
        tokens, i = largest
        call = layout.stripped[units[unit_of[i]][0]]
        what += f" (largest: result of {tool_name(layout.stripped[i], call)}, {tokens:,} tokens)"
    parts.append(what)
    if other:
        parts.append(f"other required parts {other:,}")
    parts.append(f"request overhead {fixed:,}")
    within = f" (context window {window:,})" if window is not None else ""
    biggest = max((exchanges, 0), (user, 1), (system, 2))[1]
    hint = (
        "Lower tools.keep_recent or set budget.on_required_overflow: truncate (the largest "
        "tool results are cut first)",
        "Shorten the last message",
        "Shorten the system prompt",
    )[biggest]
    return (
        f"The required parts of this request need {total:,} tokens but the budget is "
        f"{budget:,}{within}: {'; '.join(parts)}. {hint}, or use a model with a larger "
        "context window."
    )
