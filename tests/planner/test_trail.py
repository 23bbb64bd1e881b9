"""The trail: what each of an agent's actions did, read from its arguments and its command's
words (Claude Code, Codex, SWE-agent, editor tools, plain shells alike), and what the plan
does with it: a file's text kept whole or cleared, never cut to an excerpt; a read of a file
read again later ranked after the others."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.planner.history.trail import (
    EDIT,
    READ,
    RUN,
    SEARCH,
    SUPERSEDED,
    Act,
    call_act,
    command_act,
    merged,
    path_key,
    trail_weights,
)
from proxy.planner.request import plan_request
from proxy.policy.model import BudgetPolicy, CachePolicy, Policy
from proxy.tokens import TokenCounter
from tests.planner.budget.test_agents import paired

GPT_4O = TokenCounter().for_model("gpt-4o", Policy())
PER_REQUEST = Policy(budget=BudgetPolicy(ratio=1.0), cache=CachePolicy(enabled=False))
APP = "/home/dev/project/src/app.py"


@pytest.mark.parametrize(
    ("arguments", "kind", "paths", "whole"),
    [
        # Claude Code
        ({"file_path": APP}, READ, {"src/app.py"}, True),
        ({"file_path": APP, "offset": 10, "limit": 40}, READ, {"src/app.py"}, False),
        ({"file_path": APP, "old_string": "a = 1", "new_string": "a = 2"}, EDIT, {"src/app.py"}, True),
        ({"file_path": APP, "edits": [{"old_string": "x", "new_string": "y"}]}, EDIT, {"src/app.py"}, True),
        ({"file_path": APP, "content": "print(1)\n"}, EDIT, {"src/app.py"}, True),
        ({"pattern": "def handler", "path": "src"}, SEARCH, {"src"}, True),
        ({"pattern": "**/*.py"}, SEARCH, set(), True),
        ({"command": "pytest -q tests/test_app.py"}, RUN, {"tests/test_app.py"}, True),
        # an editor tool (SWE-agent's str_replace_editor, Anthropic's text editor)
        ({"command": "view", "path": APP}, READ, {"src/app.py"}, True),
        ({"command": "view", "path": APP, "view_range": [1, 20]}, READ, {"src/app.py"}, False),
        ({"command": "str_replace", "path": APP, "old_str": "a", "new_str": "b"}, EDIT, {"src/app.py"}, True),
        ({"command": "create", "path": APP, "file_text": "x"}, EDIT, {"src/app.py"}, True),
        # Codex: a shell command as an argument list
        ({"command": ["bash", "-lc", "cat src/app.py"]}, READ, {"src/app.py"}, True),
        ({"command": ["bash", "-lc", "sed -n '10,80p' src/app.py"]}, READ, {"src/app.py"}, False),
        ({"command": ["bash", "-lc", "nl -ba src/app.py | sed -n '1,40p'"]}, READ, {"src/app.py"}, False),
        ({"command": ["rg", "-n", "handler", "src/app.py"]}, SEARCH, {"src/app.py"}, True),
        ({"command": "*** Begin Patch\n*** Update File: src/app.py\n@@\n-a\n+b\n*** End Patch"},
         EDIT, {"src/app.py"}, True),
        ({"input": "*** Begin Patch\n*** Add File: docs/new.md\n+hi\n*** End Patch"},
         EDIT, {"docs/new.md"}, True),
    ],
)  # fmt: skip
def test_calls_are_read_by_what_their_arguments_do(
    arguments: dict[str, Any], kind: str, paths: set[str], whole: bool
) -> None:
    for sent in (arguments, orjson.dumps(arguments).decode()):  # as JSON text too
        act = call_act(sent)
        assert (act.kind, set(act.paths)) == (kind, paths), sent
        if kind == READ:
            assert act.whole is whole


@pytest.mark.parametrize(
    ("command", "kind", "paths"),
    [
        ("cat src/app.py", READ, {"src/app.py"}),
        ("open src/app.py 120", READ, {"src/app.py"}),  # SWE-agent
        ("head -n 50 src/app.py", READ, {"src/app.py"}),
        ("cd /repo && grep -rn 'def handler' src/", SEARCH, set()),  # a bare word: no path
        ("find . -name '*.py' | head", SEARCH, set()),
        ("sed -i 's/a = 1/a = 2/' src/app.py", EDIT, {"src/app.py"}),
        ("cat > src/app.py <<'EOF'\nprint(1)\nEOF", EDIT, {"src/app.py"}),
        ("echo done >> notes/log.txt", EDIT, {"notes/log.txt"}),
        ("python -m pytest -q", RUN, set()),
        ("FOO=1 sudo cat /etc/app/config.yaml", READ, {"app/config.yaml"}),
        ("git diff src/app.py && cat src/app.py", READ, {"src/app.py"}),
        ("", RUN, set()),
    ],
)
def test_commands_are_read_by_their_words(command: str, kind: str, paths: set[str]) -> None:
    act = command_act(command)
    assert (act.kind, set(act.paths)) == (kind, paths)


def test_paths_agree_however_spelled() -> None:
    assert path_key("/home/dev/project/src/app.py") == path_key("./src/app.py") == "src/app.py"
    assert path_key("'app.py'") == "app.py"


def test_parallel_calls_merge_to_the_strongest_kind() -> None:
    acts = [call_act({"file_path": "a/x.py"}), call_act({"file_path": "a/y.py", "content": "z"})]
    # an edit, and one of its results shows a file's text (the read's)
    assert merged(acts) == Act(EDIT, frozenset({"a/x.py", "a/y.py"}), prints=True)
    assert merged(acts).shows_file and not merged([acts[1]]).shows_file
    assert merged([]) == Act(RUN)


def test_a_command_that_writes_one_file_and_prints_another_shows_a_files_text() -> None:
    """Its kind is the edit, its output the file `cat` printed: never cut to an excerpt."""
    act = command_act("sed -n '110,180p' src/python.py > parse.py\ncat parse.py")
    assert act.kind == EDIT and act.shows_file
    assert command_act("cat src/a.py").shows_file and not command_act("cat src/a.py").prints
    assert not command_act("sed -i 's/a/b/' src/a.py").shows_file
    assert not command_act("grep -rn parse src && python -m pytest").shows_file


def test_a_read_read_again_in_whole_later_is_superseded() -> None:
    read = Act(READ, frozenset({"src/app.py"}))
    part = Act(READ, frozenset({"src/app.py"}), whole=False)
    other = Act(READ, frozenset({"src/other.py"}))
    edit = Act(EDIT, frozenset({"src/app.py"}))
    assert trail_weights([read, edit, other, read]) == [SUPERSEDED, 1.0, 1.0, 1.0]
    assert trail_weights([read, part]) == [1.0, 1.0]  # a part of it is not the file
    both = Act(READ, frozenset({"src/app.py", "src/other.py"}))
    assert trail_weights([both, read]) == [1.0, 1.0]  # one of its files is still only there


def test_a_result_shown_again_since_is_superseded_whatever_its_command() -> None:
    """SWE-agent's `goto` names no file: the window it printed, shown again after an edit
    (renumbered) or by a later `goto`, is what counts, read from the text."""
    code = [f"    total_{j} = compute(item_{j}, limit={j})" for j in range(40)]
    window = "\n".join(f"{100 + j}:{line}" for j, line in enumerate(code))
    renumbered = "\n".join(f"{101 + j}:{line}" for j, line in enumerate(code))  # a line above
    elsewhere = "\n".join(f"{300 + j}:    other_{j} = run(step_{j})" for j in range(40))
    run, shown = Act(RUN), [window, "Ran 3 tests: OK", renumbered, elsewhere]
    assert trail_weights([run] * 4, shown) == [SUPERSEDED, 1.0, 1.0, 1.0]
    assert trail_weights([run] * 4) == [1.0] * 4  # without the texts: the acts alone
    half = "\n".join(f"{100 + j}:{line}" for j, line in enumerate(code[:20]))
    assert trail_weights([run, run], [window, half]) == [1.0, 1.0]  # half of it: not again


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=200),
        st.dictionaries(st.text(max_size=12), st.one_of(st.text(max_size=40), st.integers(),
                        st.lists(st.text(max_size=10), max_size=4)), max_size=6),
        st.integers(), st.none(), st.lists(st.integers(), max_size=3),
    )
)  # fmt: skip
def test_any_arguments_read_without_raising(arguments: Any) -> None:
    act = call_act(arguments)
    assert act.kind in (READ, EDIT, SEARCH, RUN)


def code_file(name: str, n: int) -> str:
    return "\n".join(f"def {name}_{j}(request):  # handles route {j}" for j in range(n))


def call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": f"c{i}", "type": "function",
        "function": {"name": name, "arguments": orjson.dumps(args).decode()}}]}  # fmt: skip


def test_a_file_read_is_kept_whole_or_cleared_never_cut_to_an_excerpt() -> None:
    """Over the budget, an old read naming what the newest commands name stays whole or is
    cleared; a listing in the same place is cut to the lines naming it."""
    files = code_file("handler", 120)
    listing = "\n".join(f"src/routes/handler_{j}.py  {j * 37} bytes" for j in range(200))
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the route that handles 42."},
        call(0, "Read", {"file_path": "/repo/src/routes.py"}),
        {"role": "tool", "tool_call_id": "c0", "content": files},
        call(1, "Bash", {"command": "ls -la src/routes"}),
        {"role": "tool", "tool_call_id": "c1", "content": listing},
    ]
    for i in range(2, 6):
        msgs += [call(i, "Bash", {"command": f"python -c 'print({i})' # handler_42"}),
                 {"role": "tool", "tool_call_id": f"c{i}", "content": str(i)}]  # fmt: skip
    body = {"model": "gpt-4o", "messages": copy.deepcopy(msgs)}
    before = GPT_4O.count_request(body)
    out = plan_request(body, PER_REQUEST, GPT_4O, before - 1500)
    sent = out.body["messages"]
    assert paired(sent) and out.tokens_after <= out.budget
    results = {m["tool_call_id"]: m["content"] for m in sent if m.get("role") == "tool"}
    read = results.get("c0")
    assert (
        read is None or read == files or read.startswith("[context-proxy: result of Read cleared")
    )
    assert "to the parts naming" in results["c1"] and "handler_42" in results["c1"]
