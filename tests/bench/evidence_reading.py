"""Two more readings of the evidence (bench_quality.py and its end-to-end twin), and the
check that no file's text was cut to scattered lines.

- Any copy: a piece of evidence reaches the model when every string it carries is in the
  text of the forwarded messages (the proxy's recall message among them; tool calls'
  arguments not), from whichever copy: in an edit loop the newest output often shows the
  same file window again, so the older copy is not what counts. A copy of a result (or a
  user's words) is in any message but the assistant's own: what an agent wrote of a file
  is no copy of what it read; a copy of an assistant's turn (a chat's evidence) anywhere.
- Older only: the evidence whose strings the newest three steps' outputs do not all hold
  (what only older steps can give), read the same way.
- Scattered file cuts: forwarded results cut from a result that shows a file's text (a
  third of its lines or more numbered one after another, a diff, or the output of a command
  that reads a file) whose kept text is not one run of whole lines of it.
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from quality_sets import Evidence, Msg

NEWEST = 3  # steps whose outputs are "the newest"
_PROXY = "[context-proxy:"
_MARKS = (_PROXY, "[…truncated")  # the proxy's lines in a cut
_NUMBERED = re.compile(r"^[ \t]*(\d+)(?:\t|→|:|\||-)", re.M)
_DIFF = re.compile(r"^(?:@@ -\d+(?:,\d+)? \+\d+|diff --git )", re.M)
_READERS = frozenset(("cat", "nl", "head", "tail", "sed", "open", "goto", "view"))


def content_text(message: Msg) -> str:
    """A message's text: its string content, or its text blocks' and results' text."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content if isinstance(content, list) else ():
        if isinstance(block, dict):
            inner = block.get("text", block.get("content"))
            parts.append(inner if isinstance(inner, str) else content_text({"content": inner}))
    return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class Copies:
    """What the model reads of a forwarded request: every message's text, and the text of
    every message but its own (the assistant's)."""

    every: str
    outputs: str


def copies(out: Sequence[Msg]) -> Copies:
    """The text of `out`'s messages, tool calls' arguments aside."""
    texts = [(m.get("role") == "assistant", content_text(m)) for m in out]
    return Copies("\n".join(t for _, t in texts), "\n".join(t for own, t in texts if not own))


def reached(found: Copies, messages: Sequence[Msg], evidence: Sequence[Evidence]) -> int:
    """The evidence whose strings are all in a copy: of a tool's or a user's text, any
    message but the assistant's own (what the agent wrote is no copy of what it read); of
    an assistant's turn (a chat's evidence), any message."""
    count = 0
    for ev in evidence:
        own = messages[ev.index].get("role") == "assistant"
        text = found.every if own else found.outputs
        count += all(k in text for k in ev.keys)
    return count


def older_only(messages: Sequence[Msg], evidence: Sequence[Evidence]) -> list[Evidence]:
    """The evidence whose strings the outputs of the newest NEWEST steps do not all hold
    (a step: an assistant message and what follows it up to the next one)."""
    starts = [i for i, m in enumerate(messages) if m.get("role") == "assistant"][-NEWEST:]
    first = starts[0] if starts else len(messages)
    newest = copies(messages[first:]).outputs
    return [ev for ev in evidence if not all(k in newest for k in ev.keys)]


def shows_file(text: str, command: str = "") -> bool:
    """Whether a result shows a file's text (this reader's own rule, not the proxy's)."""
    if _DIFF.search(text):
        return True
    numbers = [int(n) for n in _NUMBERED.findall(text)]
    following = sum(1 for a, b in itertools.pairwise(numbers) if b == a + 1)
    if following >= 3 and 3 * following >= sum(1 for line in text.split("\n") if line.strip()):
        return True  # mostly lines numbered one after another (a few in a log: a record)
    if "<<" in command:  # a heredoc: a file written, its text in the command
        return False
    for part in re.split(r"\n|&&|\|\||;", command):  # a part that prints a file it reads
        piece = part.split("|", maxsplit=1)[0]
        try:
            words = shlex.split(piece)
        except ValueError:
            words = piece.split()
        if words and words[0] in _READERS and ">" not in piece and "-i" not in words:
            return True
    return False


def scattered_file_cuts(messages: Sequence[Msg], out: Sequence[Msg]) -> tuple[int, int]:
    """(cuts of file text, those not one run of whole lines of their result)."""
    commands = _commands(messages)
    texts = [content_text(m) for m in messages]
    at: dict[str, list[int]] = {}
    for k, t in enumerate(texts):
        at.setdefault(t, []).append(k)
    pos = 0  # messages keep their order: a cut comes from an original after the last found
    cuts = bad = 0
    for m in out:
        text = content_text(m)
        if text in at:  # as it came: the first copy of it from here on (texts may repeat)
            pos = next((k + 1 for k in at[text] if k >= pos), pos)
            continue
        if m.get("role") == "assistant" or text.startswith(_PROXY):
            continue
        body = "\n".join(line for line in text.split("\n") if not line.startswith(_MARKS))
        body = body.strip("\n")
        k = _source(messages, texts, m, body, pos)
        if k is None:
            continue
        pos = k + 1
        if shows_file(texts[k], commands.get(k, "")):
            cuts += 1
            bad += not _one_run(body, texts[k])
    return cuts, bad


def _one_run(body: str, source: str) -> bool:
    at = source.find(body)
    if not body or at < 0:
        return False
    end = at + len(body)
    return (at == 0 or source[at - 1] == "\n") and (end == len(source) or source[end] == "\n")


def _source(
    messages: Sequence[Msg], texts: Sequence[str], cut: Msg, body: str, pos: int
) -> int | None:
    """The original a cut result came from: its call's result, or among the outputs from
    `pos` on that hold every line it kept the first that starts as it does (a cut keeps
    its result's head), else the first of them."""
    call = cut.get("tool_call_id")
    if call is not None:
        return next((k for k, m in enumerate(messages) if m.get("tool_call_id") == call), None)
    lines = [line for line in body.split("\n") if line.strip() and line.strip() != "[…]"]
    found = [
        k
        for k in range(pos, len(messages))
        if messages[k].get("role") == cut.get("role") and all(x in texts[k] for x in lines)
    ]
    head = [k for k in found if lines and texts[k].startswith(lines[0])]
    return (head or found or [None])[0]


_FENCE = re.compile(r"```[a-z]*\n(.*?)\n```\s*\Z", re.S)


def _commands(messages: Sequence[Msg]) -> dict[int, str]:
    """Each result's command (by its index): its call's, or for a text agent's output the
    fenced command of the message before it."""
    out: dict[int, str] = {}
    calls: dict[str, str] = {}
    for k, m in enumerate(messages):
        for call in m.get("tool_calls") or ():
            function = call.get("function", {})
            calls[call.get("id", "")] = _command_of(
                function.get("name", ""), function.get("arguments")
            )
        if m.get("tool_call_id") in calls:
            out[k] = calls[m["tool_call_id"]]
        elif k and m.get("role") == "user" and messages[k - 1].get("role") == "assistant":
            fenced = _FENCE.search(content_text(messages[k - 1]))
            if fenced:
                out[k] = fenced.group(1)
    return out


def _command_of(name: str, arguments: Any) -> str:
    try:
        args = orjson.loads(arguments) if isinstance(arguments, str) else arguments
    except orjson.JSONDecodeError:
        return str(arguments)
    if not isinstance(args, dict):
        return ""
    value = args.get("command", args.get("cmd"))
    if isinstance(value, str) and value:
        return value
    if isinstance(args.get("args"), str):
        return f"{name} {args['args']}"
    if isinstance(args.get("file_path"), str) and not ({"old_string", "content"} & set(args)):
        return "view " + args["file_path"]
    return ""
