"""Inclusion log step: per request, which `x_context` ids went in, with their tokens and action."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import orjson

from proxy.usage.record import utc_now_iso
from proxy.usage.writer import UsageLog

if TYPE_CHECKING:
    from proxy.planner import PlanReport
    from proxy.usage.record import UsageRecord

__all__ = ["MAX_IDS", "MAX_ID_CHARS", "InclusionLog", "carries_ids", "inclusion_line"]

# Ids and model names come from clients: a line stays small whatever they send. Ids past
# MAX_IDS are counted (`ids_omitted`), not listed; a longer id is cut to MAX_ID_CHARS.
MAX_IDS = 256
MAX_ID_CHARS = 128
_MODEL_CHARS = 200
# The planner's actions, as the log names them (seed 004: what happened to each id).
_ACTIONS = {
    "keep": "kept",
    "summary-inserted": "kept",
    "truncate": "truncated",
    "clear": "cleared",
    "compact": "kept",  # the same JSON without spaces
    "drop": "dropped",
    "summarize": "summarized",
    "dedupe": "deduped",
}


@dataclass(frozen=True, slots=True)
class _Line:
    """A finished line, in the shape the usage log's writer takes (request_id, to_json_line)."""

    request_id: str
    line: bytes

    def to_json_line(self) -> bytes:
        return self.line


def carries_ids(messages: object) -> bool:
    """Whether any message names an id: `x_context.id`, or an inline `<context ... id=`."""
    if not isinstance(messages, list):
        return False
    for m in messages:
        if not isinstance(m, dict):
            continue
        tag = m.get("x_context")
        if isinstance(tag, dict) and tag.get("id") is not None:
            return True
        if any("<context" in t and "id=" in t for t in _texts(m.get("content"))):
            return True
    return False


def _texts(content: object) -> Iterable[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"]


def inclusion_line(report: PlanReport, request_id: str, team: str, model: str) -> bytes | None:
    """The log line for one planned request: every report item with an id, in message
    order, with its tokens before and after and its action; None when no item has an id.
    Numbers and names only: never message content."""
    rows: list[Mapping[str, Any]] = []
    omitted = 0
    for item in report.items:
        if item.id is None:
            continue
        if len(rows) >= MAX_IDS:
            omitted += 1
            continue
        rows.append(
            {
                "id": str(item.id)[:MAX_ID_CHARS],
                "tokens": item.tokens,
                "tokens_after": item.tokens_after,
                "action": _ACTIONS.get(item.action, item.action),
            }
        )
    if not rows:
        return None
    line = {
        "ts": utc_now_iso(),
        "request_id": request_id,
        "team": team,
        "model": model[:_MODEL_CHARS],
        "budget": report.budget,
        "tokens_before": report.tokens_before,
        "tokens_after": report.tokens_after,
        "ids": rows,
        "ids_omitted": omitted,
    }
    return orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE)


class InclusionLog:
    """The opt-in inclusion log (`--inclusion-log PATH`): lines go through the usage log's
    writer (one writer thread, batched whole-line appends, off the event loop, kept
    through a full disk), to a file of their own."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._writer = UsageLog(path)
        self._started: asyncio.Future[None] | None = None

    async def start(self) -> None:
        """Open the file and start the writer, once, however many callers wait on it."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._writer.start())
        await asyncio.shield(self._started)

    def write(self, request_id: str, line: bytes) -> None:
        """Queue one line; never blocks and never raises into the request path."""
        # The writer reads only request_id and to_json_line() from what it is handed.
        self._writer.write(cast("UsageRecord", _Line(request_id, line)))

    @property
    def written(self) -> int:
        return self._writer.written

    @property
    def dropped(self) -> int:
        return self._writer.dropped

    async def flush(self) -> None:
        await self._writer.flush()

    async def aclose(self) -> None:
        """Write what is queued, fsync and close (only if it was ever started)."""
        if self._started is not None:
            await asyncio.shield(self._started)
            await self._writer.aclose()
