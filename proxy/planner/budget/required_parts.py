"""Required parts: what a request that cannot fit is made of, named for its 400 error.

An agent's request is mostly its newest tool exchanges; telling it to "shorten the last
message" when a 5,800-token tool result is the problem helps no one. So the message names
the system prompt, the last user message and the newest tool exchanges with their tokens
(and the largest result), and the hint follows the largest of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from proxy.planner.parts import Layout, tool_name
from proxy.types import Section

_TOOL_ROLES = ("tool", "function")


def limit_phrase(window: int | None, answer: int, limit: int) -> str:
    """What the required parts may take alone, said with what sets it."""
    if window is None:
        return f"the budget of {limit:,}"
    if not answer:
        return f"the model's context window of {window:,} holds ({limit:,} with its margin)"
    if limit <= 0:  # the answer's room alone fills the window
        return (
            f"the model's context window of {window:,} holds: max_tokens keeps {answer:,} "
            "tokens for the answer, the whole window or more"
        )
    return (
        f"the model's context window of {window:,} holds beside the {answer:,} tokens "
        f"max_tokens keeps for the answer ({limit:,})"
    )


def shorten(by_section: Mapping[Section, int], answer: int = 0) -> str:
    """The hint of a refusal: the largest of what takes the room, named."""
    system = by_section.get(Section.SYSTEM_PROMPT, 0)
    rest = sum(by_section.values()) - system
    largest = max((answer, 0), (rest, 1), (system, 2))[1]
    return (
        "Lower max_tokens (the room kept for the answer)",
        "Shorten the last message",
        "Shorten the system prompt",
    )[largest]


def describe(
    layout: Layout,
    required: Sequence[int],
    cost: Sequence[int],
    figures: tuple[int, int, int | None, int],
    limit: str,
    answer: int = 0,
) -> str | None:
    """The error message when the current turn holds tool exchanges, else None (the
    caller's message, by section, fits plain chat). `figures`: (tokens needed, budget,
    context window, request overhead); `limit`: what they may take, said (limit_phrase);
    `answer`: the tokens max_tokens keeps for the answer."""
    total, budget, _, fixed = figures
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
            other += cost[k]  # the previous turn, tagged required, or of an unknown shape
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
    biggest = max((exchanges, 0), (user, 1), (system, 2), (answer, 3))[1]
    hint = (
        "Lower tools.keep_recent or set budget.on_required_overflow: truncate (the largest "
        "tool results are cut first)",
        "Shorten the last message",
        "Shorten the system prompt",
        "Lower max_tokens (the room kept for the answer)",
    )[biggest]
    return (
        f"The required parts of this request need {total:,} tokens: over the budget of "
        f"{budget:,}, and more than {limit}: "
        f"{'; '.join(parts)}. {hint}, or use a model with a larger context window."
    )
