"""File text is told from records by its content (history/file_text.py), and a forwarded
request never carries an excerpt of it: an old result showing a file's lines is kept whole
or cleared, whatever the command was called and however its arguments name the file."""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.planner.budget.cuts import cut_decision
from proxy.planner.history.file_text import shows_file_text, whole_lines
from proxy.planner.report import Refused
from proxy.planner.request import plan_request
from proxy.policy.model import BudgetPolicy, CachePolicy, Policy
from proxy.tokens import TokenCounter
from tests.planner.budget.test_agents import paired
from tests.planner_fakes import WordTokenizer

GPT_4O = TokenCounter().for_model("gpt-4o", Policy())
PER_REQUEST = Policy(budget=BudgetPolicy(ratio=1.0), cache=CachePolicy(enabled=False))
CACHED = Policy(budget=BudgetPolicy(ratio=1.0))
TRUNCATE = Policy(budget=BudgetPolicy(ratio=1.0, on_required_overflow="truncate"))
SOURCE = [f"    value_{j} = compute(item_{j}, limit={j})" for j in range(1, 121)]
TARGET = "resolve_lookup_value"


def nl(lines: list[str], first: int = 1) -> str:
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(lines, first))


def swe_window(lines: list[str], first: int, total: int) -> str:
    """SWE-agent's `open`/`goto` window: a header, numbered lines, what is above and below."""
    head = f"[File: /testbed/app/query.py ({total} lines total)]\n({first - 1} more lines above)"
    body = [f"{n}:{line}" for n, line in enumerate(lines, first)]
    return "\n".join([head, *body, f"({total - first - len(lines) + 1} more lines below)"])


def test_numbered_windows_of_every_agent_are_file_text() -> None:
    assert shows_file_text(nl(SOURCE[:40], 200))  # nl -ba, cat -n (Codex, bash agents)
    codex = json.dumps({"output": nl(SOURCE[:40]), "metadata": {"exit_code": 0}})
    assert shows_file_text(codex)  # Codex's shell tool: the output in a JSON object
    read = "\n".join(f"{n:6}→{line}" for n, line in enumerate(SOURCE[:30], 1))
    assert shows_file_text(read + "\n\n<system-reminder>\nLook out.\n</system-reminder>")
    window = swe_window(SOURCE[:100], 100, 400)
    assert shows_file_text(window)  # SWE-agent's open, goto, scroll and edit windows
    assert shows_file_text(window + "\nFile updated. Please review the changes.")
    grep = "14:def CASCADE(collector):\n15-    collector.collect(x)\n16-    if field.null:\n17-"
    assert shows_file_text(grep)  # grep -n with context lines
    diff = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -3,2 +3,2 @@\n-a = 1\n+a = 2\n"
    assert shows_file_text(diff)
    assert shows_file_text("*** Begin Patch\n*** Update File: src/x.py\n@@\n-a\n+b\n")


def test_records_are_not_file_text() -> None:
    rows = [{"flight": f"HAT{100 + j}", "price": 100 + j} for j in range(40)]
    assert not shows_file_text(json.dumps(rows))
    assert not shows_file_text(json.dumps(rows, indent=2))
    assert not shows_file_text(json.dumps({"output": "12 passed in 0.3s", "metadata": {}}))
    assert not shows_file_text('{"output": "broken')  # not JSON: read as it is
    log = "\n".join(f"12:{m:02d}:01 INFO request {m} served in 3 ms" for m in range(30))
    assert not shows_file_text(log)  # a clock is no line number
    hits = "\n".join(f"{n}:    return handler_{n}(request)" for n in (14, 88, 203, 377, 412))
    assert not shows_file_text(hits)  # grep -n hits far apart: a listing
    assert not shows_file_text("\n".join(f"src/pkg/module_{j}.py" for j in range(50)))
    assert not shows_file_text("\n".join(f"| {j} | row {j} | {j * 3} |" for j in range(20)))
    assert not shows_file_text("1: yes\n2: no")  # too short to be a window
    noisy = "\n".join(
        [f"DEBUG node {j}" for j in range(60)] + [f"{n}: <node {n}>" for n in range(5)]
    )
    assert not shows_file_text(noisy)  # a short numbered list inside a long log


def test_a_cut_head_of_file_text_ends_on_a_whole_line() -> None:
    assert whole_lines("a\nb\nc") == "a\nb"
    assert whole_lines("abc") == "abc"  # one line: nothing to end on
    text = nl(SOURCE)
    cost = GPT_4O.count_text(text)
    cut = cut_decision(GPT_4O, text, (cost, cost // 3), 20, "m-1")
    assert cut.text is not None
    head = cut.text.split("\n[…truncated", 1)[0]
    assert text.startswith(head + "\n")  # whole lines, the file's head
    log = " ".join(f"word{j}" for j in range(2000))  # not a file: cut token-exactly as before
    plain = cut_decision(GPT_4O, log, (2000, 500), 20, "m-1")
    assert plain.text is not None and not log.startswith(plain.text.split("\n[…")[0] + " ")


def call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": f"DISCUSSION step {i}", "tool_calls": [{
        "id": f"c{i}", "type": "function",
        "function": {"name": name, "arguments": orjson.dumps(args).decode()}}]}  # fmt: skip


def swe_run() -> list[dict[str, Any]]:
    """A SWE-agent run in its tool form: `open` and `goto` name the file in one `args`
    string or not at all; the newest steps name the function an edit will change."""
    code = [*SOURCE[:60], f"    def {TARGET}(self, value, can_reuse):", *SOURCE[60:]]
    steps: list[tuple[str, dict[str, Any], str]] = [
        ("open", {"args": "app/query.py 50"}, swe_window(code[:100], 1, 400)),
        ("goto", {"args": "150"}, swe_window([*SOURCE[10:60], f"        {TARGET}()"], 101, 400)),
        ("bash", {"command": "ls tests"}, "\n".join(f"test_{j}.py" for j in range(40))),
        ("goto", {"args": "250"}, swe_window(SOURCE[20:120], 201, 400)),
        ("bash", {"command": "python reproduce.py"}, "Traceback: TypeError " * 40),
        ("search_file", {"args": f'"{TARGET}"'}, f"Found 1 matches\nLine 61:    def {TARGET}"),
        ("bash", {"command": f"grep -rn {TARGET} app | head"}, f"app/query.py:61: {TARGET}"),
        ("bash", {"command": "python reproduce.py"}, f"{TARGET} failed"),
    ]
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You use SWE-agent's interface: open, goto, edit."},
        {"role": "user", "content": "SimpleLazyObject fails in a filter: fix the query."},
    ]
    for i, (name, args, output) in enumerate(steps):
        msgs += [call(i, name, args), {"role": "tool", "tool_call_id": f"c{i}", "content": output}]
    return msgs


def as_text(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same run as a text agent: the command in a fence, its output a user message."""
    out: list[dict[str, Any]] = []
    for m in msgs:
        if m.get("tool_calls"):
            f = m["tool_calls"][0]["function"]
            args = orjson.loads(f["arguments"])
            command = args.get("command") or f"{f['name']} {args['args']}"
            out.append({"role": "assistant", "content": f"{m['content']}\n\n```\n{command}\n```"})
        elif m["role"] == "tool":
            out.append({"role": "user", "content": m["content"] + "\n(Open file: app/query.py)"})
        else:
            out.append(m)
    return out


def one_run_or_cleared(original: str, sent: str) -> bool:
    """Whether `sent` is `original` whole, cleared (or recalled whole, quoted), or one run
    of its whole lines."""
    if sent == original or sent.startswith("[context-proxy:"):
        return True
    body = "\n".join(x for x in sent.split("\n") if not x.startswith(("[context-proxy:", "[…")))
    at = original.find(body)
    end = at + len(body)
    return (
        at >= 0 and (at == 0 or original[at - 1] == "\n") and original[end : end + 1] in ("", "\n")
    )


def check_forwarded(msgs: list[dict[str, Any]], policy: Policy, cut: int) -> list[str]:
    """Plans `msgs` `cut` tokens under their size; the forwarded outputs that differ."""
    body = {"model": "gpt-4o", "messages": copy.deepcopy(msgs)}
    before = GPT_4O.count_request(body)
    out = plan_request(body, policy, GPT_4O, before - cut)
    assert out.tokens_after <= before - cut
    sent = out.body["messages"]
    assert paired(sent)
    originals = [m for m in msgs if m.get("role") in ("tool", "user")]
    changed = []
    for m in sent:
        if m.get("role") not in ("tool", "user") or m in originals:
            continue
        changed.append(m["content"])
        sources = [o["content"] for o in originals if o.get("role") == m["role"]]
        if m.get("tool_call_id"):
            sources = [
                o["content"] for o in originals if o.get("tool_call_id") == m["tool_call_id"]
            ]
        windows = [s for s in sources if shows_file_text(s)]
        assert not windows or any(one_run_or_cleared(s, m["content"]) for s in windows), m
    return changed


def test_a_swe_agent_window_is_never_cut_to_an_excerpt() -> None:
    """The newest steps name the function the window shows: the window stays whole or is
    cleared (the code before this cut it to its head and the line naming the function)."""
    msgs = swe_run()
    for cut in (600, 1500, 2500):
        changed = check_forwarded(msgs, PER_REQUEST, cut)
        assert changed  # results were cut or cleared: the check saw them
        assert not any("to the parts naming" in c for c in changed)
        check_forwarded(msgs, CACHED, cut)  # cache mode: its plan as of a step boundary too


def test_a_text_agents_window_is_never_cut_to_an_excerpt() -> None:
    msgs = as_text(swe_run())
    for cut in (600, 1500, 2500):
        assert check_forwarded(msgs, PER_REQUEST, cut)
        check_forwarded(msgs, CACHED, cut)


def test_a_record_is_still_cut_to_the_lines_naming_what_matters() -> None:
    """A listing in the same run keeps its excerpt: records are not file text."""
    msgs = swe_run()
    rows = [f"app/module_{j}.py  size {j * 37}" for j in range(160)]
    rows[90] = f"app/lookups.py  defines {TARGET}"
    msgs[7]["content"] = "\n".join(rows)  # the `ls` step's output: a listing
    changed = check_forwarded(msgs, PER_REQUEST, 3500)
    [cut] = [c for c in changed if "to the parts naming" in c]
    assert f"\n{rows[90]}\n" in cut and rows[50] not in cut


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="ab \t:→0123456789-@+", max_size=12), max_size=60))
def test_any_text_is_read_without_raising(lines: list[str]) -> None:
    text = "\n".join(lines)
    assert shows_file_text(text) in (True, False)
    assert text.startswith(whole_lines(text))


WORDS = WordTokenizer()
STYLES = ("nl", "swe", "read", "json", "listing")


def output(style: str, start: int, size: int, names: list[str]) -> str:
    """A tool result in one of the shapes agents see: a numbered file window (nl -ba,
    SWE-agent's window, Claude Code's Read) or a record (JSON, a listing)."""
    lines = [
        f"    {names[j % len(names)]}_{start + j} = compute(item_{start + j})" for j in range(size)
    ]
    if style == "nl":
        return nl(lines, start)
    if style == "swe":
        return swe_window(lines, start, start + size + 50)
    if style == "read":
        return "\n".join(f"{n:6}→{line}" for n, line in enumerate(lines, start))
    if style == "json":
        return json.dumps([{"id": f"{names[0]}_{start + j}", "n": j} for j in range(size)])
    return "\n".join(f"src/{names[j % len(names)]}_{start + j}.py" for j in range(size))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(STYLES), st.integers(1, 400), st.integers(5, 60)),
        min_size=4,
        max_size=12,
    ),
    st.lists(st.sampled_from(["resolve", "lookup", "handler", "parser"]), min_size=1, max_size=3),
    st.floats(0.2, 0.9),
    st.sampled_from([PER_REQUEST, CACHED, TRUNCATE]),
)
def test_no_forwarded_request_carries_an_excerpt_of_a_files_text(
    steps: list[tuple[str, int, int]], names: list[str], share: float, policy: Policy
) -> None:
    """Any run of windows and records, any budget: every result showing a file's text is
    forwarded whole, cleared (or recalled whole), or as one run of its whole lines."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the lookup."},
    ]
    for i, (style, start, size) in enumerate(steps):
        args = {"args": f"{names[i % len(names)]}_{start + 1}"}
        msgs += [call(i, style, args),
                 {"role": "tool", "tool_call_id": f"c{i}", "content": output(style, start, size, names)}]  # fmt: skip
    body = {"model": "m", "messages": copy.deepcopy(msgs)}
    total = sum(WORDS.count_message(m) for m in msgs) + 3
    try:
        out = plan_request(body, policy, WORDS, max(200, int(total * share)))
    except Refused:  # the newest exchanges alone over the window: refused, never cut
        assert policy is not TRUNCATE
        return
    sent = out.body["messages"]
    assert paired(sent)
    by_id = {m.get("tool_call_id"): m["content"] for m in msgs if m.get("role") == "tool"}
    for m in sent:
        if m.get("role") == "tool" and shows_file_text(by_id[m["tool_call_id"]]):
            assert one_run_or_cleared(by_id[m["tool_call_id"]], m["content"]), m
