"""The SWE-agent-shaped set of bench_quality.py: the coding-agent runs rewritten as SWE-agent's
interface shows them, with tool calls (`swe-agent`) and as text (`swe-agent-text`).

SWE-agent reads and edits files through its own commands, whose outputs are file windows
with numbered lines: `open PATH LINE` and `goto LINE` (no file named: the open one) print
`[File: PATH (N lines total)]`, `(K more lines above)`, `LINE:text` lines and `(M more lines
below)`; `edit A:B` (its replacement text, then `end_of_edit`) replaces lines A-B of the open
file and prints the window around them again. The runs (../shared/data/agent-runs, read in
place) are rewritten step by step, from what each command printed and did:

- a view of one file (`nl -ba F | sed -n 'A,Bp'`, `sed -n 'A,Bp' F`, `nl`/`head`/`cat` of one
  file) is `goto` when that file is the open one, else `open F LINE`, and prints the lines
  the run's command printed, as SWE-agent's window (N: the most lines of F seen in the run);
- a one-line `sed -i` that appends, inserts, deletes or substitutes lines this run has seen
  is `edit A:B` over the changed lines and the 2 on either side (the model writes the
  lines around a change again, as SWE-agent's models do), printing the window after it;
- `grep -n P F` (one file, no context) is `search_file "P" F`, with its matches as
  SWE-agent lists them; every other command is `bash` (its output unwrapped).

The tool form declares one function per command, each taking one `args` string (the file is
in that string, or nowhere: `goto`); the text form ends each assistant message with the
command in a fence and sends the output back as a user message with SWE-agent's trailer.
Evidence is bench_agents.py's: the older outputs holding the next command's paths,
identifiers and code lines (an edit's replacement lines among them).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from quality_sets import Evidence, Msg, Point, Stream

ROOT_DIR = "/testbed"
CONTEXT = 2  # lines an edit writes again on either side of its change
SHOWN = 45  # lines an edit's window shows on either side of it, where known
SYSTEM = (
    "SETTING: You are an autonomous programmer working in a command line with a special "
    "interface.\nCOMMANDS:\nopen <path> [<line_number>]: opens the file at the given path, "
    "showing 100 lines around the line\ngoto <line_number>: moves the window to the line\n"
    "scroll_down, scroll_up: move the window by 100 lines\nsearch_file <term> [<file>]: "
    "searches for the term in the file\nedit <start_line>:<end_line>\n<replacement_text>\n"
    "end_of_edit: replaces the lines of the open file, then shows the window\nsubmit: "
    "submits the change\nAny other bash command runs as it is."
)
UPDATED = (
    "File updated. Please review the changes and make sure they are correct (correct "
    "indentation, no duplicate lines, etc). Edit the file again if necessary."
)
_NL = re.compile(r"^ *(\d+)\t(.*)$")
_SED_RANGE = re.compile(r"^'?(\d+)(?:,(\d+))?p'?$")
_WRAP = re.compile(
    r"\A<returncode>(-?\d+)</returncode>\n(?:<output>\n)?(.*?)(?:</output>)?\s*\Z", re.S
)
_SED_EDIT = re.compile(r"^sed -i '(\d+)(?:,(\d+))?([aicd])(\\?)(.*)' (\S+)$")
_SED_SUB = re.compile(
    r"^sed -i '(\d+(?:,\d+)?)?s(.)((?:\\.|(?!\2).)+)\2((?:\\.|(?!\2).)*)\2g?' (\S+)$"
)
TOOLS = ("open", "goto", "edit", "search_file", "bash")


@dataclass
class Files:
    """What the run has seen of each file: its lines by number, and the most lines seen."""

    lines: dict[str, dict[int, str]] = field(default_factory=dict)
    total: dict[str, int] = field(default_factory=dict)
    open: str | None = None

    def window(self, path: str, first: int, last: int) -> str:
        known = self.lines.get(path, {})
        total = max(self.total.get(path, 0), max(known, default=0))
        start, end = first, last
        while start - 1 in known and start > first - SHOWN:
            start -= 1
        while end + 1 in known and end < last + SHOWN:
            end += 1
        body = [f"{n}:{known[n]}" for n in range(start, end + 1) if n in known]
        head = [f"[File: {ROOT_DIR}/{path} ({total} lines total)]"]
        if start > 1:
            head.append(f"({start - 1} more lines above)")
        tail = [f"({total - end} more lines below)"] if total > end else []
        return "\n".join([*head, *body, *tail])


def unwrapped(output: str) -> tuple[int, str] | None:
    found = _WRAP.match(output)
    if found is None or "<warning>" in output[:200]:
        return None
    return int(found.group(1)), found.group(2).rstrip("\n")


def _viewed(command: str, out: str) -> tuple[str, dict[int, str]] | None:
    """The file and numbered lines a view command printed; None for anything else."""
    try:
        parts = [shlex.split(p) for p in command.split("|")]
    except ValueError:
        return None
    lines = out.split("\n") if out else []
    first = parts[0]
    if (
        first[:2] == ["nl", "-ba"]
        and len(first) == 3
        and all(p and p[0] in ("sed", "head", "tail") for p in parts[1:])
    ):
        found = [_NL.match(line) for line in lines]
        if not lines or not all(found):
            return None
        return first[2], {int(m.group(1)): m.group(2) for m in found if m}
    if len(parts) != 1:
        return None
    if first[:2] == ["sed", "-n"] and len(first) == 4 and (r := _SED_RANGE.match(first[2])):
        return first[3], {int(r.group(1)) + k: line for k, line in enumerate(lines)}
    if first[0] in ("cat", "head") and len(first) in (2, 4) and first[1:2] != ["<<"]:
        if len(first) == 4 and first[1] != "-n":
            return None
        return first[-1], {1 + k: line for k, line in enumerate(lines)}
    return None


def _edited(command: str, files: Files) -> tuple[str, int, int, list[str]] | None:
    """A one-line `sed -i` on lines seen: (file, first, last replaced, replacement lines)."""
    if "\n" in command:
        return None
    if m := _SED_EDIT.match(command):
        a, b, op, escaped, text, path = m.groups()
        text = text if escaped else text.lstrip()  # GNU sed: `a\` keeps the text's indent
        known = files.lines.get(_relative(path), {})
        first, last = int(a), int(b or a)
        new = text.replace("\\n", "\n").split("\n") if op != "d" else []
        if op == "a":
            last, new = first, [known.get(first, "\0"), *new]
        elif op == "i":
            last, new = first, [*new, known.get(first, "\0")]
    elif m := _SED_SUB.match(command):
        span, _, old, repl, path = m.groups()
        known = files.lines.get(_relative(path), {})
        lo, _, hi = (span or "0,").partition(",")
        top = int(hi) if hi else (int(lo) if span else 1 << 30)
        old, repl = _literal(old), _literal(repl)
        if old is None or repl is None or "&" in repl:
            return None
        hits = [n for n, line in sorted(known.items()) if old in line and int(lo) <= n <= top]
        if not hits or hits[-1] - hits[0] > 10:
            return None
        first, last = hits[0], hits[-1]
        new = [known.get(n, "\0").replace(old, repl) for n in range(first, last + 1)]
    else:
        return None
    before = [known.get(n) for n in range(first - CONTEXT, first)]
    after = [known.get(n) for n in range(last + 1, last + 1 + CONTEXT)]
    if any(x is None for x in before + after) or any("\0" in x for x in new):
        return None
    return _relative(path), first - CONTEXT, last + CONTEXT, [*before, *new, *after]  # type: ignore[list-item]


def _literal(pattern: str) -> str | None:
    """A sed pattern that is a plain string (escaped punctuation allowed), as that string."""
    if re.search(r"(?<!\\)[*^$\[]|\\[A-Za-z0-9]", pattern):
        return None
    return re.sub(r"\\(.)", r"\1", pattern)


def _relative(path: str) -> str:
    return path.removeprefix("./").removeprefix(ROOT_DIR + "/")


def _apply(files: Files, path: str, first: int, last: int, new: list[str]) -> None:
    known = files.lines.setdefault(path, {})
    shift = len(new) - (last - first + 1)
    moved = {n + shift if n > last else n: t for n, t in known.items() if not first <= n <= last}
    moved.update({first + k: t for k, t in enumerate(new)})
    files.lines[path] = moved
    files.total[path] = files.total.get(path, 0) + shift


def rewrite(command: str, output: str, files: Files) -> tuple[str, str, str]:
    """One step as SWE-agent shows it: (tool, its args, what it printed)."""
    wrapped = unwrapped(output)
    if wrapped is None:
        return "bash", command, output
    code, out = wrapped
    view = _viewed(command.strip(), out) if code == 0 else None
    if view is not None and view[1]:
        path, lines = view[0], view[1]
        path = _relative(path)
        files.lines.setdefault(path, {}).update(lines)
        first, last = min(lines), max(lines)
        files.total[path] = max(files.total.get(path, 0), last)
        centre = (first + last) // 2
        tool, args = ("goto", str(centre)) if files.open == path else ("open", f"{path} {centre}")
        files.open = path
        body = [f"{n}:{lines[n]}" for n in sorted(lines)]
        return tool, args, _framed(files, path, first, last, body)
    edit = _edited(command.strip(), files) if code == 0 else None
    if edit is not None:
        path, first, last, new = edit
        _apply(files, path, first, last, new)
        files.open = path
        args = f"{first}:{last}\n" + "\n".join(new) + "\nend_of_edit"
        return "edit", args, files.window(path, first, first + len(new) - 1) + "\n" + UPDATED
    search = _searched(command.strip(), out) if code in (0, 1) else None
    if search is not None:
        return "search_file", search[0], search[1]
    _learn_heredoc(command, files)
    return "bash", command, out


def _framed(files: Files, path: str, first: int, last: int, body: list[str]) -> str:
    total = files.total[path]
    head = [f"[File: {ROOT_DIR}/{path} ({total} lines total)]"]
    head += [f"({first - 1} more lines above)"] if first > 1 else []
    tail = [f"({total - last} more lines below)"] if total > last else []
    return "\n".join([*head, *body, *tail])


def _searched(command: str, out: str) -> tuple[str, str] | None:
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if len(words) != 4 or words[:2] != ["grep", "-n"] or "|" in command:
        return None
    term, path = words[2], words[3]
    hits = [line for line in out.split("\n") if re.match(r"\d+:", line)] if out else []
    where = f"{ROOT_DIR}/{path.removeprefix('./')}"
    if not hits:
        return f'"{term}" {path}', f'No matches found for "{term}" in {where}'
    listed = "\n".join(f"Line {h}" for h in hits)
    found = f'Found {len(hits)} matches for "{term}" in {where}:\n{listed}\n'
    return f'"{term}" {path}', found + f'End of matches for "{term}" in {where}'


def _learn_heredoc(command: str, files: Files) -> None:
    """A file written whole with a heredoc: its lines are known from then on."""
    m = re.match(r"^cat <<'?EOF'? > (\S+)\n(.*)\nEOF\s*$", command, re.S)
    if m:
        path, text = _relative(m.group(1)), m.group(2)
        files.lines[path] = {1 + k: line for k, line in enumerate(text.split("\n"))}
        files.total[path] = text.count("\n") + 1


def swe_run(messages: Sequence[Msg]) -> tuple[list[Msg], list[str | None]]:
    """A run's messages in SWE-agent's tool form, and each message's command (as text)."""
    out: list[Msg] = [{"role": "system", "content": SYSTEM}]
    commands: list[str | None] = [None]
    files = Files()
    pending: dict[str, str] = {}  # call id -> the command, until its result comes
    for m in messages[1:]:
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        if calls:
            pending = {c["id"]: _argument(c) for c in calls}
            out.append(m)
            commands.append(None)
            continue
        if m.get("role") == "tool" and m.get("tool_call_id") in pending:
            call = out[-1]
            tool, args, shown = rewrite(pending[m["tool_call_id"]], str(m["content"]), files)
            key = "command" if tool == "bash" else "args"
            arguments = orjson.dumps({key: args}).decode()
            function = {"name": tool, "arguments": arguments}
            calls = [{**c, "function": function} if c["id"] == m["tool_call_id"] else c
                     for c in call["tool_calls"]]  # fmt: skip
            out[-1] = {**call, "tool_calls": calls}
            commands[-1] = args if tool == "bash" else f"{tool} {args}"
            out.append({**m, "content": shown})
            commands.append(None)
            continue
        out.append(m)
        commands.append(None)
    return out, commands


def _argument(call: dict[str, Any]) -> str:
    try:
        args = orjson.loads(call["function"]["arguments"])
    except (orjson.JSONDecodeError, KeyError):
        return ""
    return str(args.get("command", "")) if isinstance(args, dict) else ""


def swe_tools() -> list[dict[str, Any]]:
    def tool(name: str, key: str) -> dict[str, Any]:
        params = {"type": "object", "properties": {key: {"type": "string"}}, "required": [key]}
        return {"type": "function", "function": {"name": name, "parameters": params,
                "description": f"SWE-agent's `{name}` command."}}  # fmt: skip

    return [tool(name, "command" if name == "bash" else "args") for name in TOOLS]


def as_swe_text(messages: Sequence[Msg], commands: Sequence[str | None]) -> list[Msg]:
    """The tool form as SWE-agent's text form: DISCUSSION and the command in a fence; the
    output back as a user message with the open file and directory after it."""
    out: list[Msg] = []
    opened = "n/a"
    for k, m in enumerate(messages):
        if m.get("role") == "assistant" and m.get("tool_calls"):
            thought = str(m.get("content") or "").strip().removeprefix("THOUGHT:").strip()
            command = commands[k]
            text = f"DISCUSSION\n{thought}\n\n```\n{command or ''}\n```"
            out.append({"role": "assistant", "content": text})
        elif m.get("role") == "tool":
            shown = str(m.get("content") or "")
            if shown.startswith("[File: "):
                opened = shown[len("[File: ") : shown.index(" (")]
            trailer = f"(Open file: {opened})\n(Current directory: {ROOT_DIR})\nbash-$"
            out.append({"role": "user", "content": f"{shown}\n{trailer}"})
        else:
            out.append({k2: v for k2, v in m.items() if k2 in ("role", "content")})
    return out


def swe_agent(limit: int = 0, text: bool = False) -> list[Stream]:
    """The set's streams: each run at every tool call, its evidence as bench_agents.py's."""
    from bench_agents import DEFAULT_PATH, evidence, load

    streams: list[Stream] = []
    for r, row in enumerate(load(DEFAULT_PATH.resolve())[: limit or None]):
        msgs, commands = swe_run(row["messages"])
        sent = as_swe_text(msgs, commands) if text else msgs
        points = []
        for k, m in enumerate(msgs):
            command = commands[k] if m.get("tool_calls") else None
            if command is None or k < 2:
                continue
            body: dict[str, Any] = {"model": "gpt-4o", "messages": sent[:k]}
            if not text:
                body["tools"] = swe_tools()
            found = evidence(msgs[:k], command, 8)
            index = {msg.get("tool_call_id"): i for i, msg in enumerate(msgs[:k])}
            ev = [Evidence(index[c], tuple(sorted(keys))) for c, keys in found.items()]
            points.append(Point(body, ev, scored=True, query=command))
        name = ("swe-agent-text/" if text else "swe-agent/") + str(r)
        streams.append(Stream(name, points))
    return streams
