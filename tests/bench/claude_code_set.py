"""The Claude Code set of bench_quality.py: real Claude Code sessions as Messages bodies, at
each decision point of ../shared/data/claude-code/ (its README gives source, licence and
the evidence rule, followed here).

A point's body is the Messages body the client sent (`Point.native`); its chat form (what
the proxy plans, anthropic.to_chat) is what the evidence indexes. The next action's
repeated strings are its 25-character windows (text blocks and every string of its calls'
inputs, thinking left out) that begin and end with a non-space character and are absent
from the first user message and the newest user prompt; paths are made relative on both
sides (the session's working directories removed) and system reminders ignored. A piece of
evidence is a chat message derived from one of the case's evidence messages, with the
windows it holds: kept when all of them survive.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from quality_sets import DATA, Evidence, Msg, Point, Stream

from proxy import anthropic
from proxy.items.read import MARK

FOLDER = DATA / "claude-code"
WINDOW = 25
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.S)


def claude_code(limit: int = 0) -> list[Stream]:
    """One stream per context, its decision points in order (not a replay: the points are
    steps apart)."""
    runs = {r["id"]: r for r in _lines(FOLDER / "trajectories.jsonl")}
    cases: dict[str, list[dict[str, Any]]] = {}
    for case in _lines(FOLDER / "cases.jsonl"):
        cases.setdefault(case["traj"], []).append(case)
    streams: list[Stream] = []
    for traj in sorted(cases)[: limit or None]:
        run = runs[traj]
        relative = partial(_relative, tuple(sorted(run["cwds"], key=len, reverse=True)))
        points = [_point(run, case, relative) for case in sorted(cases[traj], key=_n)]
        streams.append(Stream(traj, points, replay=False, normalize=relative))
    return streams


def _point(run: dict[str, Any], case: dict[str, Any], relative: Callable[[str], str]) -> Point:
    messages = run["messages"]
    n = case["n"]
    native = {"model": run["model"], "max_tokens": 4096, "tools": run["tools"],
              "messages": messages[:n]}  # fmt: skip
    conv = anthropic.to_chat(native)
    chat = [{k: v for k, v in m.items() if k != MARK} for m in conv.messages]
    body = {"model": run["model"], "messages": chat, "tools": conv.body.get("tools") or []}
    asked = [relative(_text(messages[0]))]
    prompt = _newest_prompt(messages[:n])
    if prompt is not None:
        asked.append(relative(prompt))
    action = " ".join(_action_strings(messages[n]))
    keys = _windows(relative(action), asked)
    evidence: list[Evidence] = []
    wanted = set(case["evidence"])
    for i, source in enumerate(conv.sources):
        if source.message not in wanted:
            continue
        held = relative(_REMINDER.sub("", str(chat[i].get("content") or "")))
        found = sorted(k for k in keys if k in held)
        if found:
            evidence.append(Evidence(i, tuple(found)))
    return Point(body, evidence, scored=True, native=native, query=action)


def _windows(action: str, asked: list[str]) -> set[str]:
    """The action's windows that begin and end with a non-space character and are in none
    of the `asked` texts."""
    out = set()
    for start in range(len(action) - WINDOW + 1):
        window = action[start : start + WINDOW]
        if window[0].isspace() or window[-1].isspace():
            continue
        if not any(window in text for text in asked):
            out.add(window)
    return out


def _action_strings(message: Msg) -> Iterator[str]:
    """The next action: its text blocks and every string in its calls' inputs."""
    for block in message.get("content") or ():
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            yield str(block.get("text") or "")
        elif block.get("type") == "tool_use":
            yield from _strings(block.get("input"))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _newest_prompt(messages: list[Msg]) -> str | None:
    """The newest user message the developer wrote (text, not tool results)."""
    for m in reversed(messages):
        if m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, str):
            return content
        texts = [
            b.get("text") for b in content or () if isinstance(b, dict) and b.get("type") == "text"
        ]
        if texts and not any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        ):
            return "\n".join(str(t) for t in texts)
    return None


def _text(message: Msg) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(" ".join(_strings(b)) for b in content or () if isinstance(b, dict))


def _relative(cwds: tuple[str, ...], text: str) -> str:
    for cwd in cwds:
        text = text.replace(cwd.rstrip("/") + "/", "").replace(cwd, "")
    return text


def _n(case: dict[str, Any]) -> int:
    return int(case["n"])


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
