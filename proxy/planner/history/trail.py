"""Trail: what each of a coding agent's actions did to its files, read from the action
itself (its call's JSON arguments, its command's text), never from one agent's tool names.

An action reads a file (a file's text came back: Claude Code's Read, Codex's `cat`,
`sed -n`, `nl`, SWE-agent's `open`, an editor tool's `view`), edits one (`old_string` and
`new_string`, `edits`, a file's whole `content`, `str_replace`, `apply_patch`, `sed -i`, a
redirection into a file), searches (`pattern`, `query`, `glob`; `grep`, `rg`, `find`, `ls`)
or runs something else. Paths are compared by their last two components, so that an
absolute and a relative spelling of one file agree.

What the plan takes from it: a file's text is kept whole or not at all (clearing.py: an
excerpt keeps the lines the newest commands name, not the ones the next edit will quote);
a read of a file the agent read again in whole later is superseded, and goes before the
other old results (older_order.py).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.planner.history.file_text import shown_again
from proxy.planner.parts import Layout

READ, EDIT, SEARCH, RUN = "read", "edit", "search", "run"
_STRENGTH = {EDIT: 3, READ: 2, SEARCH: 1, RUN: 0}

_PATH_KEYS = frozenset(
    ("file_path", "path", "filename", "file", "notebook_path", "target_file", "filepath",
     "relative_path", "absolute_path", "file_name", "target")
)  # fmt: skip
_EDIT_KEYS = frozenset(
    ("old_string", "new_string", "old_str", "new_str", "edits", "content", "file_text",
     "new_source", "contents", "insert_line", "replace_all", "code_edit")
)  # fmt: skip
_SEARCH_KEYS = frozenset(("pattern", "query", "regex", "glob", "search_term", "include"))
_RANGE_KEYS = frozenset(("offset", "limit", "view_range", "start_line", "end_line", "lines"))
_EDITOR_READS = frozenset(("view", "read", "open"))
_EDITOR_EDITS = frozenset(("create", "str_replace", "insert", "undo_edit", "write", "edit"))

_READERS = frozenset(("cat", "nl", "head", "tail", "less", "more", "bat", "view", "open"))
_PARTIAL_READERS = frozenset(("head", "tail", "sed", "awk", "goto", "scroll_up", "scroll_down"))
_SEARCHERS = frozenset(
    ("grep", "egrep", "rg", "ag", "ack", "find", "fd", "ls", "tree", "find_file",
     "search_file", "search_dir", "glob", "locate")
)  # fmt: skip
_EDITORS = frozenset(("apply_patch", "patch", "create", "touch", "mv", "cp", "rm", "tee"))
_WRAPPERS = frozenset(("sudo", "time", "nohup", "env", "command", "exec", "xargs"))
_SHELLS = frozenset(("bash", "sh", "zsh"))
_SEPARATORS = re.compile(r"\n|&&|\|\||;|\|")
_PATCH_FILE = re.compile(r"^(?:\*\*\* (?:Update|Add|Delete) File: |\+\+\+ b/|--- a/)(\S+)", re.M)
_PATHLIKE = re.compile(r"[\w.~/-]*[\w-](?:/[\w.-]+|\.[A-Za-z][\w]{0,5})")


@dataclass(frozen=True, slots=True)
class Act:
    """What an action did: its kind, the files it named (path keys), for a read whether it
    showed the whole file, and whether a part of it printed a file's text (a command that
    writes one file and prints another, `sed -n 1,80p a.py > b.py; cat b.py`, is an edit
    whose output is a file's text)."""

    kind: str
    paths: frozenset[str] = frozenset()
    whole: bool = True
    prints: bool = False

    @property
    def shows_file(self) -> bool:
        """Whether its result shows a file's text."""
        return self.kind == READ or self.prints


NOTHING = Act(RUN)


def path_key(path: str) -> str:
    """A path as compared: its last two components (an absolute and a relative spelling of
    a file in a project agree)."""
    parts = [p for p in path.strip("'\"").split("/") if p and p != "."]
    return "/".join(parts[-2:])


def call_act(arguments: Any) -> Act:
    """The act of a tool call, from its arguments (a JSON object or its text)."""
    if isinstance(arguments, str):
        text = arguments
        try:
            arguments = orjson.loads(arguments) if arguments[:1] in ("{", "[") else arguments
        except orjson.JSONDecodeError:
            arguments = text
    if isinstance(arguments, str):  # a patch or a command given as the whole input
        return _patch_act(arguments) or command_act(arguments)
    if not isinstance(arguments, dict):
        return NOTHING
    keys = arguments.keys()
    paths = frozenset(
        path_key(v) for k, v in arguments.items() if k in _PATH_KEYS and isinstance(v, str) and v
    )
    command = arguments.get("command", arguments.get("cmd"))
    if isinstance(command, list):
        command = _unwrapped([str(c) for c in command])
    for value in arguments.values():
        if isinstance(value, str) and (patched := _patch_act(value)) is not None:
            return patched
    if isinstance(command, str) and paths and command in _EDITOR_READS | _EDITOR_EDITS:
        if command in _EDITOR_READS:  # an editor tool: `view` a file
            return Act(READ, paths, "view_range" not in keys)
        return Act(EDIT, paths)
    if paths and not keys.isdisjoint(_EDIT_KEYS):
        return Act(EDIT, paths)
    if not keys.isdisjoint(_SEARCH_KEYS):
        return Act(SEARCH, paths)
    if isinstance(command, str) and command.strip():
        return command_act(command)
    if paths:
        return Act(READ, paths, keys.isdisjoint(_RANGE_KEYS))
    return NOTHING


def command_act(command: str) -> Act:
    """The act of a shell command (or a text agent's), from its words: the strongest of its
    parts (an edit over a read over a search), with the files it names."""
    acts = [_segment_act(words) for words in _segments(command)]
    acts = [a for a in acts if a is not NOTHING]
    if not acts:
        return NOTHING
    kind = max((a.kind for a in acts), key=_STRENGTH.__getitem__)
    chosen = [a for a in acts if a.kind == kind]
    paths = frozenset().union(*(a.paths for a in chosen))
    prints = kind != READ and any(a.kind == READ for a in acts)  # a read part's output shown
    return Act(kind, paths, all(a.whole for a in chosen), prints)


def merged(acts: Iterable[Act]) -> Act:
    """One unit's acts (parallel calls) as one: the strongest kind, every file named."""
    found = [a for a in acts if a is not NOTHING]
    if not found:
        return NOTHING
    kind = max((a.kind for a in found), key=_STRENGTH.__getitem__)
    paths = frozenset().union(*(a.paths for a in found))
    prints = kind != READ and any(a.shows_file for a in found)
    return Act(kind, paths, all(a.whole for a in found), prints)


def trail_weights(acts: Sequence[Act], shown: Sequence[str] = ()) -> list[float]:
    """Per act (units in conversation order, `shown`: their results' text): the weight of
    its result in the ranking of old results: SUPERSEDED for a read of files the agent
    read again, in whole, later, and for a result whose lines a later one shows again (the
    same file window, the same output: file_text.shown_again)."""
    later_reads: set[str] = set()
    weights: list[float] = []
    for act in reversed(acts):  # newest first: what came after each act is known
        superseded = act.kind == READ and act.paths and act.paths <= later_reads
        weights.append(SUPERSEDED if superseded else 1.0)
        if act.kind == READ and act.whole:
            later_reads.update(act.paths)
    weights.reverse()
    if shown:
        again = shown_again(shown)
        weights = [SUPERSEDED if a else w for w, a in zip(weights, again, strict=True)]
    return weights


def unit_act(layout: Layout, unit: Sequence[int]) -> Act:
    """The act of one unit of the history: its calls' (or its text agent's command's)."""
    acts: list[Act] = []
    for i in unit:
        command = layout.commands.get(i)
        if command is not None:
            acts.append(command_act(command))
            continue
        m = layout.stripped[i]
        calls = m.get("tool_calls") if type(m) is dict else None
        for call in calls if type(calls) is list else ():
            function = call.get("function") if type(call) is dict else None
            if type(function) is dict:
                acts.append(call_act(function.get("arguments")))
    return merged(acts)


# The weight of a superseded read: the newer text is what the file holds, and the older
# one may quote lines an edit has since changed. (On the shared sets it moved no evidence
# recall by more than 0.005: the evidence rule counts the older copy too.) Other signals
# tried (a file the newest actions touch x2, edited since x0.5, not yet edited x1.5) moved
# the Claude Code set by +0.01 to +0.04 per request and cost the agent runs up to 0.03.
SUPERSEDED = 0.25


def _segments(command: str) -> Iterator[list[str]]:
    for piece in _SEPARATORS.split(command):
        part = piece.strip()
        if not part:
            continue
        try:
            words = shlex.split(part, posix=True)
        except ValueError:  # an unclosed quote (a heredoc's body, a fragment)
            words = part.split()
        if words:
            yield words


def _segment_act(words: list[str]) -> Act:
    redirected = [
        words[k + 1] if w in (">", ">>") and k + 1 < len(words) else w.lstrip(">")
        for k, w in enumerate(words)
        if w.startswith(">") and w not in (">&2", ">&1", "2>&1")
    ]
    written = frozenset(path_key(p) for p in redirected if p and p != "/dev/null")
    while words and (words[0] in _WRAPPERS or "=" in words[0].split("/")[0]):
        words = words[1:]
    if not words:
        return Act(EDIT, written) if written else NOTHING
    program = words[0].rsplit("/", 1)[-1]
    if program in _SHELLS and "-c" in words[1:2] + words[1:3] and len(words) > 2:
        return command_act(words[-1])
    args = [w for w in words[1:] if not w.startswith("-") and not w.startswith(">")]
    named = frozenset(path_key(a) for a in args if _PATHLIKE.fullmatch(a))
    if written:
        return Act(EDIT, written)
    if program in ("sed", "perl"):
        inplace = any(w.startswith("-i") or w == "--in-place" for w in words[1:])
        return Act(EDIT if inplace else READ, named, False)
    if program == "str_replace_editor" and args:
        sub = args[0]
        return Act(READ if sub in _EDITOR_READS else EDIT, named)
    if program in _READERS | _PARTIAL_READERS:  # with no file named it reads a pipe
        whole = program not in _PARTIAL_READERS and len(args) <= len(named)
        return Act(READ, named, whole) if named else NOTHING
    if program in _EDITORS:
        return Act(EDIT, named)
    if program in _SEARCHERS or (program == "git" and args[:1] in (["grep"], ["ls-files"])):
        return Act(SEARCH, named)
    return Act(RUN, named)


def _patch_act(text: str) -> Act | None:
    """An edit, when `text` is a patch (apply_patch's or a unified diff)."""
    if "*** Begin Patch" not in text and "\n+++ " not in text and not text.startswith("--- "):
        return None
    files = frozenset(path_key(p) for p in _PATCH_FILE.findall(text))
    return Act(EDIT, files) if files else None


def _unwrapped(argv: list[str]) -> str:
    """A command given as an argument list (["bash", "-lc", "..."]) as its text."""
    if len(argv) >= 3 and argv[0].rsplit("/", 1)[-1] in _SHELLS and argv[1].startswith("-"):
        return argv[-1]
    return shlex.join(argv)
