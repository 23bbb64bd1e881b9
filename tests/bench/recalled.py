"""Evidence reachable (bench_quality.py): what one call of the proxy's `context_recall`
tool would return for a trimmed request, served as the server serves it (proxy/recall/).

The call asks by query only: a chat's newest user message (the least a model knows of what
it needs), an agent's next action's target (its command, its tool call's arguments). Its
answer is sized as the server sizes it when the request sets no answer limit: half of
what the window leaves past the forwarded prompt, at most the policy's recall.max_tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.policy.model import RecallPolicy
from proxy.recall import Recallable, answer

Msg = dict[str, Any]


def recall_once(
    messages: Sequence[Msg],
    out: Sequence[Msg],
    query: str | None,
    window: tuple[int, int],
    tok: Any,
) -> Msg | None:
    """The tool's answer as a message (None when the call would find nothing: no query)."""
    if query is None:
        asked = [m for m in messages if m.get("role") == "user"]
        content = asked[-1].get("content") if asked else None
        query = content if isinstance(content, str) else None
    if not query or not query.strip():
        return None
    size, used = window
    room = min(RecallPolicy().max_tokens, (size - used - 16) // 2)
    if room < 64:
        return None
    got = answer(Recallable(messages, out), {"query": query[:2000]}, room, tok)
    return {"role": "tool", "content": got.text}
