"""Hostile text: what the tag, attribute and heading scanners, cluster settling and dedupe
make of text crafted to make them slow (tests/hostile_text.py), at 1 MB.

How long they take is measured by tests/bench/bench_scan.py (docs/benchmarks.md), never
here. Here: the rewritten scanners are held to the old regex readings (kept below as the
reference) on short generated text and on each hostile shape at a small size, and read the
same shape at 1 MB alike, so the contract's tagging rules are unchanged.
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.planner.budget.clusters import Substitution
from proxy.planner.history.repeats import dedupe
from proxy.planner.parts.sections import build_layout
from proxy.planner.parts.tag_attrs import parse_attrs
from proxy.planner.parts.tags import Block, split_blocks, split_headings
from proxy.policy.model import DEFAULT_HEADINGS, Policy
from proxy.tokens.counter import TokenCounter
from tests.hostile_text import (
    MB,
    PIECES,
    TAGS_IN_USER,
    clusters,
    fill,
    hostile_blocks,
    hostile_headings,
    plan_in_user_text,
    repeated_summaries,
    settle_calls,
)

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


pieces = st.lists(st.sampled_from(PIECES), min_size=1, max_size=40).map("".join)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces)
def test_blocks_read_as_the_old_patterns_did(text: str) -> None:
    assert_read_as_reference(text)


def assert_read_as_reference(text: str) -> None:
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


# --- the old payloads, at 1 MB ------------------------------------------------------------

SMALL = 2_000  # the old regex readings take milliseconds at this size


def _kinds(pieces: list[str | Block]) -> list[str]:
    return ["text" if isinstance(p, str) else "block" for p in pieces]


def test_old_block_payloads_read_as_the_old_patterns_did() -> None:
    small, large = hostile_blocks(SMALL), hostile_blocks(MB)
    for name, text in small.items():
        assert_read_as_reference(text)
        got, problems = split_blocks(large[name])
        want, want_problems = split_blocks(text)
        assert _kinds(got) == _kinds(want), name  # the same reading, 500x longer
        assert len(problems) == len(want_problems), name
        if all(isinstance(p, str) for p in got):  # no block: forwarded as written
            assert "".join(p for p in got if isinstance(p, str)) == large[name], name


def test_old_heading_payloads_read_as_the_old_pattern_did() -> None:
    small, large = hostile_headings(SMALL), hostile_headings(MB)
    for name, text in small.items():
        assert split_headings(text, DEFAULT_HEADINGS) == ref_split_headings(text), name
        got = split_headings(large[name], DEFAULT_HEADINGS)
        assert "".join(t for _, t in got) == large[name], name
        assert {s for s, _ in got} == {s for s, _ in ref_split_headings(text)}, name


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=12).map("".join))
def test_generated_hostile_text_reads_alike_at_any_length(unit: str) -> None:
    small, large = fill(unit, SMALL), fill(unit, MB)
    assert_read_as_reference(small)
    got, want = split_blocks(large)[0], split_blocks(small)[0]
    # Pieces grow with the repeats of the unit, no faster: a read that runs N units into
    # k*N-1 pieces (a separator between each) gives (len(want) + 1) per copy of `small`.
    copies = -(-len(large) // len(small))
    assert len(got) <= (len(want) + 1) * copies
    assert sum(len(p) for p in got if isinstance(p, str)) <= len(large)


# --- cluster settling ----------------------------------------------------------------------


def _settled(body: dict[str, Any], window: int) -> Substitution:
    """What `settle` returned, last, while planning `body`."""
    sub: Substitution = settle_calls(body, window)[-1][1]
    return sub


def test_many_summaries_of_one_cluster_settle_as_one() -> None:
    # ~1 MB: 4,000 members of one cluster and 4,000 summaries of it (old: seconds, n^2)
    sub = _settled(clusters(4000, shared=True), 20000)
    assert len(sub.members) == 4000 and len(set(sub.members.values())) == 1
    assert sub.active and all(len(sub.lost(c)) > 0 for c in sub.active)


def test_clusters_each_with_a_summary_settle_each_alone() -> None:
    sub = _settled(clusters(4000, shared=False), 20000)
    assert len(sub.members) == 4000


# --- the whole plan, and dedupe --------------------------------------------------------------


def test_a_hostile_1mb_request_forwards_its_text_as_the_tags_allow() -> None:
    tokenizer = TokenCounter().for_model("gpt-4o", TAGS_IN_USER)
    blocks = hostile_blocks(MB)
    forwarded = {  # a block's tags removed (its bad attributes reported); the rest as written
        "attribute name without =": "x",
        "unbalanced openers": blocks["unbalanced openers"][: -len("<context></context>")],
        "self-closing": blocks["self-closing"],
    }
    for name, want in forwarded.items():
        outcome = plan_in_user_text(blocks[name], tokenizer)
        assert outcome.body["messages"][1]["content"] == want, name


def test_summary_lines_memory_holds_are_deduped_in_every_summary() -> None:
    layout = build_layout(repeated_summaries(1600), Policy())
    optional = [it.key for it in layout.items if not it.required]
    found = dedupe(layout, optional)
    assert len(found.rewritten) == 1600
