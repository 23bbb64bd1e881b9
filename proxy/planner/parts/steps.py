"""Text agents: an agent that acts in its text, not through tool calls, told apart by shape.

Such an agent (SWE-agent, mini-swe-agent, CodeAct-style loops) ends each assistant message
with the action it takes, a command in a fenced block or an action element, and the client
sends what the command printed back as the next user message. That message is no person
speaking: it is outside text, like a tool result. A request is read as a text agent when,
after its setup, most assistant messages end with such an action and at least two of them
are answered by a user message; each such pair is then one step, kept or dropped together,
its output cleared or recalled like a tool result, and the steps' commands are what the
agent is doing now.

Only the structure is read (where a message ends, who answers it), never a wording of one
agent: a fence's language must be a shell's (or none) so that a chat whose assistant ends
an answer with a Python snippet is not taken for an agent.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

_CLOSING_ELEMENT = re.compile(r"</([A-Za-z][\w:.-]{0,40})>\s*\Z")
_SHELLS = frozenset(("", "bash", "sh", "shell", "zsh", "console", "cmd", "powershell", "ps"))
_TAIL = 4_000  # characters from the end looked at: an action is short, a message may not be
MIN_STEPS = 2


@dataclass(frozen=True, slots=True)
class Steps:
    """A text agent's steps: the assistant message of each and the output answering it."""

    pairs: tuple[tuple[int, int], ...] = ()
    commands: dict[int, str] = field(default_factory=dict)  # assistant message -> command

    @property
    def outputs(self) -> frozenset[int]:
        return frozenset(out for _, out in self.pairs)


NO_STEPS = Steps()


def command_of(text: str) -> str | None:
    """The command an assistant message ends with (a shell fence or an action element)."""
    if "```" not in text and "~~~" not in text and "</" not in text:
        return None
    tail = text[-_TAIL:].rstrip()
    if tail.endswith(("```", "~~~")):
        return _fenced(tail.splitlines())
    found = _CLOSING_ELEMENT.search(tail) if tail.endswith(">") else None
    if found is None:
        return None
    name = found.group(1)
    start = tail.rfind("<" + name, 0, found.start())
    after = tail[start + 1 + len(name) : start + 2 + len(name)]
    line_start = tail.rfind("\n", 0, max(start, 0)) + 1
    if start < 0 or after not in (">", " ", "\n", "\t") or tail[line_start:start].strip():
        return None  # an action element opens a line of its own
    body = tail[tail.index(">", start) + 1 : found.start()]
    return f"{name} {body.strip()}"


def _fenced(lines: list[str]) -> str | None:
    """The body of the fenced block the lines end with, if its language is a shell's."""
    close = lines[-1].strip()
    mark = close[0]
    if close.strip(mark) or len(close) < 3:
        return None  # the last line is more than a fence
    for k in range(len(lines) - 2, -1, -1):
        line = lines[k].lstrip(" \t")
        if line.startswith(mark * 3):
            language = line.lstrip(mark).strip().split(" ", 1)[0].lower()
            if language not in _SHELLS:
                return None
            return "\n".join(lines[k + 1 : -1]).strip()
    return None


def text_steps(messages: Sequence[Any], roles: Sequence[str], setup_end: int) -> Steps:
    """The request's text-agent steps after its setup; NO_STEPS when it is not one."""
    actors = 0
    pairs: list[tuple[int, int]] = []
    commands: dict[int, str] = {}
    n = len(messages)
    # Most assistant messages must end with an action: once more than half do not, the
    # request is no text agent, and the rest need not be read (this runs per request).
    assistants = roles[setup_end:].count("assistant")
    for i in range(setup_end, n):
        if roles[i] != "assistant":
            continue
        m = messages[i]
        content = m.get("content") if type(m) is dict else None
        actors += 1
        if type(content) is str and not m.get("tool_calls") and not m.get("function_call"):
            command = command_of(content)
        else:
            command = None
        if command is None:
            if 2 * (actors - len(commands)) > assistants:
                return NO_STEPS
            continue
        commands[i] = command
        if i + 1 < n and roles[i + 1] == "user":
            pairs.append((i, i + 1))
    if len(pairs) < MIN_STEPS or 2 * len(commands) < actors:
        return NO_STEPS
    return Steps(tuple(pairs), commands)
