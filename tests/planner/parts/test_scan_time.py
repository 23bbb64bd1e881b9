"""Scan time: tag, attribute and heading scanning and cluster settling stay linear on hostile text.

Crafted text once held the event loop for seconds (13 s for 20 KB of attribute text,
9 s for a 20 KB heading line, 1.6 s for 25,000 unbalanced openers, seconds of settling for
many summaries of one cluster). Each class is tested here by its shape, at 1 MB, with bounds
generous enough for a shared 2-core machine; the old code missed them by 10x or more. The
rewritten scanners are held to the old regex readings (kept below as the reference) on
short generated text, so the contract's tagging rules are unchanged.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import proxy.planner.budget.allocation as planner_module
from proxy.planner.budget.clusters import Substitution
from proxy.planner.history.repeats import dedupe
from proxy.planner.parts.sections import build_layout
from proxy.planner.parts.tag_attrs import parse_attrs
from proxy.planner.parts.tags import Block, split_blocks, split_headings
from proxy.planner.request import plan_request
from proxy.policy.model import DEFAULT_HEADINGS, ModelPolicy, Policy, TagsPolicy
from proxy.tokens.counter import TokenCounter

MB = 1_000_000

# --- the reference: the old regex readings, fine on short text --------------------------

_OPEN = re.compile(r"<context(?=[\s>])([^<>]*)>")
_ATTR = re.compile(r"""([A-Za-z_][\w-]*)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""")
_HEADING = re.compile(r"(#{1,6})[ \t]+(.*?)[ \t#]*\r?\n?$")


def ref_attrs(source: str) -> tuple[dict[str, str], list[str]]:
    attrs: dict[str, str] = {}
    for m in _ATTR.finditer(source):
        value = next(v for v in m.group(2, 3, 4) if v is not None)
        attrs.setdefault(m.group(1).lower(), value)
    rest = _ATTR.sub("", source).strip()
    return attrs, ([f"unreadable text in a <context> tag: {rest[:40]!r}"] if rest else [])


def ref_blocks(text: str) -> tuple[list[str | Block], list[str]]:
    pieces: list[str | Block] = []
    problems: list[str] = []
    pos = scan = 0
    while (m := _OPEN.search(text, scan)) is not None:
        if m.group(1).rstrip().endswith("/"):
            scan = m.end()
            continue
        close = text.find("</context>", m.end())
        if close < 0:
            problems.append(f"unclosed <context> at character {m.start()}: kept as text")
            break
        nested = _OPEN.search(text, m.end(), close)
        if nested is not None:
            problems.append(
                f"<context> at character {m.start()} has no matching close: kept as text"
            )
            scan = nested.start()
            continue
        if m.start() > pos:
            pieces.append(text[pos : m.start()])
        attrs, bad = ref_attrs(m.group(1))
        pieces.append(Block(attrs, text[m.end() : close], tuple(bad)))
        pos = scan = close + len("</context>")
    if pos < len(text) or not pieces:
        pieces.append(text[pos:])
    return pieces, problems


_FENCE = re.compile(r"[ \t]{0,3}(```|~~~)")


def ref_split_headings(text: str) -> list[tuple[Any, str]]:
    out: list[tuple[Any, str]] = []
    current: Any = None
    level = start = pos = 0
    fenced = False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#") and (m := _HEADING.match(line)):
            depth = len(m.group(1))
            section = DEFAULT_HEADINGS.get(m.group(2).strip().rstrip(":").strip().lower())
            if section is not None or (current is not None and depth <= level):
                if pos > start:
                    out.append((current, text[start:pos]))
                start = pos
                current, level = (section, depth) if section is not None else (None, 0)
        pos += len(line)
    if pos > start or not out:
        out.append((current, text[start:]))
    return out


# --- the grammar's pieces, for generated hostile text -------------------------------------

PIECES = [
    "<context",
    "<context ",
    "<context>",
    "</context>",
    "<contextual>",
    "<context />",
    " ",
    "\t",
    "\n",
    "\r\n",
    "=",
    '"',
    "'",
    ">",
    "<",
    "/",
    "a",
    "section",
    "memory",
    "id",
    "-",
    "1",
    "é",
    ":",
    "#",
    "## ",
    "# Memory",
    "```",
    "   ~~~",
    "    ```",
    "######",
    "####### x",
    "## Goal:",
    "# Working state #",
    "\r",
    "\x0b",
    "\x1c",
    "\u2028",
]
pieces = st.lists(st.sampled_from(PIECES), min_size=1, max_size=40).map("".join)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces)
def test_blocks_read_as_the_old_patterns_did(text: str) -> None:
    got, problems = split_blocks(text)
    want, want_problems = ref_blocks(text)
    assert got == want
    if len(want_problems) <= 20:
        assert problems == want_problems
    else:  # past the cap, the rest are counted in one line
        assert problems[:20] == want_problems[:20] and problems[-1].endswith("kept as text")


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from([*PIECES, "b=c", "x='y'", 'z="w"', "ü", "_"]), max_size=30))
def test_attributes_read_as_the_old_pattern_did(parts: list[str]) -> None:
    source = "".join(parts).replace("<", "").replace(">", "")  # a tag's text holds neither
    assert parse_attrs(source) == ref_attrs(source)


@settings(max_examples=1500, deadline=None)
@given(pieces)
def test_heading_sections_read_as_the_old_pattern_did(text: str) -> None:
    if "#" in text:
        assert split_headings(text, DEFAULT_HEADINGS) == ref_split_headings(text)


def test_unmatched_problems_are_capped_and_counted() -> None:
    pieces_, problems = split_blocks("<context>" * 100 + "</context>")
    assert len(problems) == 21 and problems[-1].startswith("79 more <context> tags")
    assert [p for p in pieces_ if isinstance(p, Block)] == [Block({}, "", ())]


# --- time: the old payloads and generated ones, at 1 MB -----------------------------------


def seconds(work: Callable[[], Any], repeat: int = 3) -> float:
    """Best of `repeat` runs: the least disturbed by other work on a shared machine."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def _fill(unit: str, size: int = MB) -> str:
    return unit * max(1, size // len(unit))


HOSTILE_BLOCKS = {
    # old: 20 KB took 13 s (the attribute pattern retried at every letter of a name)
    "attribute name without =": "<context " + "a" * MB + ">x</context>",
    "name then unclosed quote": "<context "
    + "a" * (MB // 2)
    + '="'
    + "b" * (MB // 2)
    + ">x</context>",
    "a= repeated, no >": "<context " + _fill("a=") + "</context>",
    'a=" repeated': "<context " + _fill('a="') + ">x</context>",
    # old: 225 KB took 1.6 s (each opener looked for its close to the end)
    "unbalanced openers": _fill("<context>") + "</context>",
    "openers without close": _fill('<context section="memory">'),
    "self-closing": _fill("<context />") + "</context>",
    "opener, no angle": _fill("<context a"),
}
HOSTILE_HEADINGS = {
    # old: 20 KB took 9 s (the lazy title against the trailing run of spaces and #)
    "spaced #": "# a" + _fill(" #") + "x",
    "spaces, tabs and #": "# " + _fill(" \t#") + "x\n",
    "spaces, no newline": "# " + " " * MB + "x",
    "many heading lines": _fill("## Memory ##  \n# x\n"),
    "hashes only": "#" * MB,
}


def test_old_block_payloads_scan_in_well_under_a_second() -> None:
    for name, text in HOSTILE_BLOCKS.items():
        assert seconds(lambda text=text: split_blocks(text), 1) < 1.0, name


def test_old_heading_payloads_scan_in_well_under_a_second() -> None:
    for name, text in HOSTILE_HEADINGS.items():
        took = seconds(lambda text=text: split_headings(text, DEFAULT_HEADINGS), 1)
        assert took < 1.0, name


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=12).map("".join))
def test_generated_hostile_text_scans_in_linear_time(unit: str) -> None:
    small, large = _fill(unit, MB // 8), _fill(unit, MB)

    def scan(text: str) -> Callable[[], Any]:
        def work() -> None:
            for piece in split_blocks(text)[0]:
                if isinstance(piece, str):
                    split_headings(piece, DEFAULT_HEADINGS)

        return work

    took_large = seconds(scan(large))
    assert took_large < 1.0, unit
    # 8x the text, under 20x the time; a 10 ms floor: caches and
    # a busy machine, not the algorithm, decide timings below it (quadratic code: 64x)
    assert took_large < 20 * max(seconds(scan(small)), 0.01), unit


# --- cluster settling ----------------------------------------------------------------------


def _settle_seconds(body: dict[str, Any], window: int) -> tuple[float, Substitution]:
    """The time `settle` took while planning `body`, and what it returned."""
    real = planner_module.settle
    spent: list[float] = []
    subs: list[Substitution] = []

    def timed(*args: Any) -> Substitution:
        start = time.perf_counter()
        sub = real(*args)
        spent.append(time.perf_counter() - start)
        subs.append(sub)
        return sub

    planner_module.settle = timed  # type: ignore[assignment]
    try:
        policy = Policy(models={"gpt-4o": ModelPolicy(context_window=window)})
        plan_request(body, policy, TokenCounter().for_model("gpt-4o", policy), window)
    finally:
        planner_module.settle = real
    return sum(spent), subs[-1]


def _clusters(n: int, shared: bool) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "rules"}]
    for i in range(n):
        cluster = "c" if shared else f"c{i}"
        messages.append(
            {
                "role": "user",
                "content": f"fact {i} " * 10,
                "x_context": {"cluster": cluster, "section": "memory"},
            }
        )
        messages.append(  # a summary the client sends (an assistant's tag would not be read)
            {"role": "user", "content": f"sum {i}", "x_context": {"summary_of": cluster}}
        )
    messages.append({"role": "user", "content": "q"})
    return {"model": "gpt-4o", "messages": messages}


def test_many_summaries_of_one_cluster_settle_in_linear_time() -> None:
    # ~1 MB: 4,000 members of one cluster and 4,000 summaries of it (old: seconds, n^2)
    took, sub = _settle_seconds(_clusters(4000, shared=True), 20000)
    assert took < 1.5  # see below
    assert len(sub.members) == 4000 and len(set(sub.members.values())) == 1
    assert sub.active and all(len(sub.lost(c)) > 0 for c in sub.active)


def test_clusters_each_with_a_summary_settle_fast() -> None:
    took, sub = _settle_seconds(_clusters(4000, shared=False), 20000)
    assert took < 1.5  # ~0.2 s idle, 0.6 s seen on a loaded shared machine; quadratic: seconds
    assert len(sub.members) == 4000


# --- the whole plan, and dedupe --------------------------------------------------------------


def test_a_hostile_1mb_request_plans_in_well_under_two_seconds() -> None:
    policy = Policy(
        models={"gpt-4o": ModelPolicy(context_window=400_000)},
        tags=TagsPolicy(inline_in_user=True),  # the user's text read for tags: the worst case
    )
    tokenizer = TokenCounter().for_model("gpt-4o", policy)
    forwarded = {  # a block's tags removed (its bad attributes reported); the rest as written
        "attribute name without =": "x",
        "unbalanced openers": HOSTILE_BLOCKS["unbalanced openers"][: -len("<context></context>")],
        "self-closing": HOSTILE_BLOCKS["self-closing"],
    }
    for name, want in forwarded.items():
        text = HOSTILE_BLOCKS[name]
        body = {
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": "rules"},
                {"role": "user", "content": text},
                {"role": "user", "content": "q"},
            ],
        }
        start = time.perf_counter()
        outcome = plan_request(body, policy, tokenizer, 400_000)
        assert time.perf_counter() - start < 2.0, name
        assert outcome.body["messages"][1]["content"] == want, name


def test_summary_lines_against_memory_stay_linear() -> None:
    lines = "\n".join(f"- {'1' * 50}{i} fact" for i in range(1000))
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": lines, "x_context": {"section": "memory"}}
    ]
    messages += [
        {
            "role": "user",
            "content": f"{lines[:600]}\nnew {i}",
            "x_context": {"section": "conversation_summary"},
        }
        for i in range(1600)
    ]  # ~1 MB of summaries, every one repeating lines memory holds
    messages.append({"role": "user", "content": "q"})
    layout = build_layout(messages, Policy())
    optional = [it.key for it in layout.items if not it.required]
    took = seconds(lambda: dedupe(layout, optional), 1)
    found = dedupe(layout, optional)
    assert took < 1.0
    assert len(found.rewritten) == 1600
