"""The trim-quality benchmark's readings (tests/bench/evidence_reading.py) and its
SWE-agent-shaped set (tests/bench/swe_agent_set.py), on small made-up runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))

import evidence_reading as r
import swe_agent_set as swe
from quality_sets import Evidence

CODE = [f"    value_{j} = compute(item_{j}, limit={j})" for j in range(1, 41)]
NL = "\n".join(f"{n:6}\t{line}" for n, line in enumerate(CODE, 1))


def wrapped(out: str, code: int = 0) -> str:
    return f"<returncode>{code}</returncode>\n<output>\n{out}\n</output>"


def test_any_copy_of_a_result_is_in_any_message_but_the_assistants_own() -> None:
    call = {"id": "c1", "function": {"name": "bash", "arguments": '{"command": "cat a_b.py"}'}}
    messages = [
        {"role": "user", "content": "fix it"},
        {
            "role": "assistant",
            "content": "I will edit compute_total in a_b.py",
            "tool_calls": [call],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "def compute_total(x): a_b.py"},
        {"role": "user", "content": [{"type": "text", "text": "see parse_header"}]},
    ]
    found = r.copies(messages[:2] + messages[3:])  # the result left out
    assert "parse_header" in found.outputs and "I will edit" not in found.outputs
    assert "I will edit" in found.every and "cat a_b.py" not in found.every  # no arguments
    of_result = [Evidence(2, ("compute_total",))]
    assert r.reached(found, messages, of_result) == 0  # only the agent's own words say it
    assert r.reached(r.copies(messages), messages, of_result) == 1
    recall = {"role": "user", "content": "[context-proxy: recalled]\n> def compute_total(x)"}
    assert r.reached(r.copies([*messages[:2], recall]), messages, of_result) == 1
    of_reply = [Evidence(1, ("I will edit compute_total",))]  # a chat's evidence: a reply
    assert r.reached(found, messages, of_reply) == 1


def test_older_only_is_what_the_newest_three_steps_do_not_all_show() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    for j in range(5):
        messages += [{"role": "assistant", "content": f"step {j}"},
                     {"role": "tool", "content": f"output {j} name_{j}"}]  # fmt: skip
    ev = [Evidence(2, ("name_0",)), Evidence(8, ("name_3",)), Evidence(2, ("name_1", "name_4"))]
    assert r.older_only(messages, ev) == [ev[0], ev[2]]


def test_a_scattered_cut_of_file_text_is_counted_a_run_of_its_lines_is_not() -> None:
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "function": {
        "name": "bash", "arguments": orjson.dumps({"command": "nl -ba app.py"}).decode()}}]}  # fmt: skip
    messages = [{"role": "user", "content": "fix"}, call,
                {"role": "tool", "tool_call_id": "c1", "content": NL}]  # fmt: skip
    lines = NL.split("\n")
    run = "\n".join(lines[10:20]) + "\n[context-proxy: result of bash cut, recall m-1]"
    scattered = "\n[…]\n".join([lines[0], lines[15]]) + "\n[context-proxy: cut]"
    placeholder = "[context-proxy: result of bash cleared, 900 tokens, recall m-1]"
    for text, counts in ((run, (1, 0)), (scattered, (1, 1)), (placeholder, (0, 0)), (NL, (0, 0))):
        out = [*messages[:2], {"role": "tool", "tool_call_id": "c1", "content": text}]
        assert r.scattered_file_cuts(messages, out) == counts
    half = "\n".join([lines[3][3:], *lines[4:9]])  # a line cut in two: not whole lines
    out = [*messages[:2], {"role": "tool", "tool_call_id": "c1", "content": half}]
    assert r.scattered_file_cuts(messages, out) == (1, 1)


def test_a_record_cut_to_its_lines_is_not_file_text() -> None:
    listing = "\n".join(f"app/module_{j}.py {j * 7} bytes" for j in range(60))
    messages = [{"role": "user", "content": "fix"}, {"role": "assistant", "content": "ls"},
                {"role": "user", "content": listing}]  # fmt: skip
    cut = "\n[…]\n".join(listing.split("\n")[::20])
    assert r.scattered_file_cuts(messages, [*messages[:2], {"role": "user", "content": cut}]) == (
        0,
        0,
    )
    assert not r.shows_file(listing, "ls -la app") and r.shows_file("x", "cat app.py")
    assert not r.shows_file("x", "cat <<'EOF' > app.py") and not r.shows_file(
        "x", "sed -i s/a/b/ f"
    )


def test_views_become_open_then_goto_windows_with_numbered_lines() -> None:
    files = swe.Files()
    tool, args, shown = swe.rewrite("nl -ba app/models.py | sed -n '1,40p'", wrapped(NL), files)
    assert (tool, args) == ("open", "app/models.py 20")
    assert shown.startswith("[File: /testbed/app/models.py (40 lines total)]\n1:    value_1 =")
    part = "\n".join(CODE[9:19])
    tool, args, shown = swe.rewrite("sed -n '10,19p' app/models.py", wrapped(part), files)
    assert (tool, args) == ("goto", "14")  # the open file: no file named
    assert shown.split("\n")[1:3] == ["(9 more lines above)", f"10:{CODE[9]}"]
    assert shown.endswith("(21 more lines below)")


def test_a_sed_edit_of_seen_lines_is_an_edit_that_prints_the_window() -> None:
    files = swe.Files()
    swe.rewrite("nl -ba app/models.py", wrapped(NL), files)
    command = "sed -i 's/limit=20)/limit=21)/' app/models.py"
    tool, args, shown = swe.rewrite(command, wrapped(""), files)
    assert tool == "edit" and args.startswith("18:22\n")
    assert args.split("\n")[3] == CODE[19].replace("limit=20)", "limit=21)")
    assert args.split("\n")[1] == CODE[17] and args.endswith("\nend_of_edit")  # lines around
    assert "20:    value_20 = compute(item_20, limit=21)" in shown and shown.endswith(swe.UPDATED)
    insert = "sed -i '5a\\    extra_line = 1' app/models.py"
    tool, args, shown = swe.rewrite(insert, wrapped(""), files)
    assert tool == "edit" and "6:    extra_line = 1\n7:" + CODE[5] in shown
    assert files.total["app/models.py"] == 41
    unseen = "sed -i 's/nowhere/x/' app/other.py"
    assert swe.rewrite(unseen, wrapped(""), files)[0] == "bash"


def test_grep_in_one_file_is_search_file_and_the_rest_stays_bash() -> None:
    files = swe.Files()
    out = "14:def CASCADE(collector):\n88:def PROTECT(collector):"
    tool, args, shown = swe.rewrite("grep -n def app/deletion.py", wrapped(out), files)
    assert (tool, args) == ("search_file", '"def" app/deletion.py')
    assert "Line 14:def CASCADE(collector):" in shown and shown.startswith("Found 2 matches")
    assert swe.rewrite("python reproduce.py", wrapped("boom", 1), files) == (
        "bash", "python reproduce.py", "boom")  # fmt: skip


def test_a_run_in_swe_agents_shape_keeps_its_steps_and_text_form() -> None:
    def step(i: int, command: str) -> dict[str, Any]:
        args = orjson.dumps({"command": command}).decode()
        return {"role": "assistant", "content": f"THOUGHT: {i}", "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": args}}]}  # fmt: skip

    messages = [{"role": "system", "content": "x"}, {"role": "user", "content": "fix"},
                step(0, "nl -ba app.py"), {"role": "tool", "tool_call_id": "c0", "content": wrapped(NL)},
                step(1, "sed -n '3,5p' app.py"),
                {"role": "tool", "tool_call_id": "c1", "content": wrapped("\n".join(CODE[2:5]))}]  # fmt: skip
    msgs, commands = swe.swe_run(messages)
    assert len(msgs) == len(messages) and msgs[0]["content"] == swe.SYSTEM
    assert commands[2] == "open app.py 20" and commands[4] == "goto 4"
    names = [m["tool_calls"][0]["function"]["name"] for m in msgs if m.get("tool_calls")]
    assert names == ["open", "goto"]
    text = swe.as_swe_text(msgs, commands)
    assert text[4]["content"].endswith("```\ngoto 4\n```") and text[5]["role"] == "user"
    assert "(Open file: /testbed/app.py)" in text[5]["content"]


def test_a_cut_is_read_against_its_own_output_when_outputs_repeat() -> None:
    """A text agent's outputs repeat ("ok" twice) and a later one shows the same lines
    numbered: the cut of the log is matched to the log it came from, not the later read."""
    lines = ["Running build v4", *(f"step {j} done in {j} ms" for j in range(60))]
    log = "\n".join(lines)
    run = "go\n\n```\npython build.py\n```"
    messages = [
        {"role": "user", "content": "fix"},
        {"role": "assistant", "content": run},
        {"role": "user", "content": "ok"},
        {"role": "assistant", "content": run},
        {"role": "user", "content": log},
        {"role": "assistant", "content": "again\n\n```\npython build.py\n```"},
        {"role": "user", "content": "ok"},
        {"role": "assistant", "content": "read it\n\n```\nnl -ba build.log\n```"},
        {"role": "user", "content": "\n".join(f"{n:6}\t{x}" for n, x in enumerate(lines, 1))},
    ]
    cut = "Running build v4\n[…]\nstep 30 done in 30 ms\n[…]\n[context-proxy: cut, recall m-1]"
    out = [*messages[:4], {"role": "user", "content": cut}, *messages[5:]]
    assert r.scattered_file_cuts(messages, out) == (0, 0)
