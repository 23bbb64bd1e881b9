"""Tests for the budget arithmetic: formula, reservations, leftovers, overflow, required cuts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.planner.budget.grants import Choice, allocate, cut_required, reservations
from proxy.planner.history import Now, keep_order, worth
from proxy.planner.parts.run import compute_budget
from proxy.policy.model import DEFAULT_SECTIONS
from proxy.relevance.scoring import score_history
from proxy.types import Section

S = Section
RANKS = {s: p.priority.rank for s, p in DEFAULT_SECTIONS.items()}


def ch(
    section: Section, cost: int, rank: int = 1, pos: int = 0, floor: int | None = None
) -> Choice:
    return Choice((pos,), section, rank, (-float(pos),), cost, cost if floor is None else floor)


@pytest.mark.parametrize(
    ("window", "ratio", "reserve", "max_out", "expected"),
    [
        (None, 0.8, True, None, None),
        (10_000, 0.8, True, None, 8000),
        (10_000, 0.8, True, 1000, 8000),  # 10000 - 1000 - 16 = 8984 > 8000
        (10_000, 0.8, True, 5000, 4984),
        (10_000, 0.8, False, 5000, 8000),
        (8191, 0.8, True, None, 6552),  # floor
        (100, 1.0, True, 200, 0),  # never negative
    ],
)
def test_compute_budget(
    window: int | None, ratio: float, reserve: bool, max_out: int | None, expected: int | None
) -> None:
    assert compute_budget(window, ratio, reserve, max_out) == expected


def test_reservations_subtract_required_use() -> None:
    ratios = {s: p.ratio for s, p in DEFAULT_SECTIONS.items()}
    res = reservations(1000, ratios, {S.SYSTEM_PROMPT: 100, S.MEMORY: 500})
    assert res[S.SYSTEM_PROMPT] == 50
    assert res[S.MEMORY] == 0
    assert res[S.RECENT_MESSAGES] == 350


def test_budgets_grow_with_the_window() -> None:
    ratios = {s: p.ratio for s, p in DEFAULT_SECTIONS.items()}
    last = {s: -1 for s in S}
    for window in range(1000, 200_000, 7919):
        budget = compute_budget(window, 0.8, True, None)
        assert budget is not None
        res = reservations(budget, ratios, {})
        assert all(res[s] >= last[s] for s in S)
        assert sum(res.values()) <= budget
        last = res


def test_reservation_then_leftover_by_priority() -> None:
    choices = [
        ch(S.MEMORY, 30, rank=1, pos=0),  # memory reserve 10
        ch(S.RETRIEVED_CONTEXT, 30, rank=2, pos=1),
        ch(S.RECENT_MESSAGES, 30, rank=3, pos=2),
    ]
    reserved = {S.MEMORY: 10, S.RETRIEVED_CONTEXT: 10, S.RECENT_MESSAGES: 10}
    # 60 available: nothing fits its reservation whole; memory is truncatable? no -> leftovers
    grants = allocate(choices, 60, reserved, RANKS)
    assert grants == [30, 30, 0]  # high first, then medium; low gets what is left: nothing


def test_reserved_share_is_guaranteed_before_leftovers() -> None:
    choices = [
        ch(S.SCAFFOLDING_REMINDER, 5, rank=3, pos=0),  # low, fits its own reservation
        ch(S.RECENT_MESSAGES, 100, rank=1, pos=1),
    ]
    grants = allocate(choices, 50, {S.SCAFFOLDING_REMINDER: 5, S.RECENT_MESSAGES: 40}, RANKS)
    assert grants[0] == 5  # a low-priority section keeps its reservation
    assert grants[1] == 0  # drop section: too big, not truncatable


def test_no_token_wasted_and_never_over() -> None:
    choices = [
        ch(S.RECENT_MESSAGES, c, rank=1 + p % 3, pos=p) for p, c in enumerate([7, 3, 9, 4, 12, 1])
    ]
    for available in range(0, 40):
        grants = allocate(choices, available, {S.RECENT_MESSAGES: 10}, RANKS)
        assert sum(grants) <= available
        assert all(g in (0, c.cost) for g, c in zip(grants, choices, strict=True))
        left = available - sum(grants)
        assert all(c.cost > left for g, c in zip(grants, choices, strict=True) if g == 0)


def test_drop_section_skips_a_big_item_and_keeps_smaller_older_ones() -> None:
    choices = [
        ch(S.RECENT_MESSAGES, 5, pos=0),
        ch(S.RECENT_MESSAGES, 50, pos=1),
        ch(S.RECENT_MESSAGES, 5, pos=2),
    ]
    assert allocate(choices, 12, {S.RECENT_MESSAGES: 12}, RANKS) == [5, 0, 5]


def test_truncate_section_cuts_the_boundary_item() -> None:
    choices = [ch(S.MEMORY, 20, pos=1, floor=5), ch(S.MEMORY, 20, pos=0, floor=5)]
    grants = allocate(choices, 30, {S.MEMORY: 30}, RANKS)
    assert grants == [20, 10]  # newest whole, the next cut to what is left


def test_boundary_item_below_its_floor_is_dropped_and_smaller_ones_follow() -> None:
    choices = [ch(S.MEMORY, 20, pos=1, floor=15), ch(S.MEMORY, 3, pos=0)]
    # the boundary item would need 15 even cut: dropped; the older, smaller one still fits
    assert allocate(choices, 12, {S.MEMORY: 12}, RANKS) == [0, 3]


def test_truncated_item_grows_with_leftovers() -> None:
    choices = [ch(S.MEMORY, 40, pos=0, floor=5)]
    assert allocate(choices, 30, {S.MEMORY: 10}, RANKS) == [30]


def test_group_truncation_in_a_drop_section() -> None:
    group = Choice((1, 2), S.RECENT_MESSAGES, 1, (0.0,), 100, 20)
    assert allocate([group], 60, {S.RECENT_MESSAGES: 60}, RANKS) == [60]
    assert allocate([group], 10, {S.RECENT_MESSAGES: 60}, RANKS) == [0]


def test_score_order_comes_from_the_order_key() -> None:
    hi = Choice((0,), S.RETRIEVED_CONTEXT, 2, (-0.9, 0.0), 10, 10)
    lo = Choice((1,), S.RETRIEVED_CONTEXT, 2, (-0.1, -1.0), 10, 10)
    assert allocate([lo, hi], 10, {S.RETRIEVED_CONTEXT: 10}, RANKS) == [0, 10]


def test_only_a_floor_below_cost_allows_a_cut() -> None:
    cuttable = [ch(S.RETRIEVED_CONTEXT, 20, pos=1, floor=5)]
    assert allocate(cuttable, 10, {S.RETRIEVED_CONTEXT: 10}, RANKS) == [10]
    whole = [ch(S.RETRIEVED_CONTEXT, 20, pos=1)]
    assert allocate(whole, 10, {S.RETRIEVED_CONTEXT: 10}, RANKS) == [0]


@pytest.mark.parametrize(
    ("sizes", "excess", "expected"),
    [
        ([(1, 100, False), (2, 50, False), (3, 500, True)], 30, {1: 32}),
        ([(1, 100, False), (2, 50, False), (3, 500, True)], 140, {1: 100, 2: 44}),
        ([(1, 100, False), (3, 500, True)], 200, {1: 100, 3: 104}),  # the current turn last
        ([(1, 1, False)], 5, {}),  # too small to help
    ],
)
def test_cut_required(
    sizes: list[tuple[int, int, bool]], excess: int, expected: dict[int, int]
) -> None:
    assert cut_required(sizes, excess, marker=2) == expected


def _chat_now(asked: str, context: str = "") -> Now:
    return Now(asked, "", context, False)


def _order(texts: list[str], asked: str | None, context: str = "", neighbors: int = 0) -> list[int]:
    """Each text's place in keep order, as units of equal cost."""
    n = len(texts)
    values = (
        [0.0] * n
        if asked is None
        else worth(texts, [10] * n, [0] * n, _chat_now(asked, context), None)
    )
    order = keep_order(values, list(range(n)), neighbors)
    rank = [0] * n
    for k, c in enumerate(order):
        rank[c] = k
    return rank


def test_history_keep_order_recency_and_relevance() -> None:
    texts = ["the cat sat", "dogs bark loudly", "a cat again"] + [f"pad{i}" for i in range(12)]
    assert _order(texts[:4], None) == [3, 2, 1, 0]
    rank = _order(texts, "cat")
    assert {rank[0], rank[2]} == {0, 1}  # both cat turns first
    assert rank[14] < rank[13] < rank[12]  # far from any hit: newest first
    rank = _order(texts, "zebra", context="cat")
    assert {rank[0], rank[2]} == {0, 1}  # the newest turns' words count too


def test_history_neighbors_follow_a_hit() -> None:
    texts = ["a", "b", "c", "the zebra", "d", "e", "f", "g"]
    rank = _order(texts, "zebra", neighbors=1)
    assert rank[3] == 0 and {rank[2], rank[4]} == {1, 2}


def test_worth_counts_ids_reuse_and_cost() -> None:
    """An id the request names now outweighs words; a result whose ids came back later
    outweighs one that did not; at equal match, the shorter unit is worth more."""
    texts = ["booking for flight details", "reservation ZX81Q7 booked", "flight details"]
    values = worth(texts, [10, 10, 10], [0, 0, 0], _chat_now("change ZX81Q7 flight details"), None)
    assert values[1] > values[0] and values[1] > values[2]
    same = ["cabin upgrade", "cabin upgrade"]
    values = worth(same, [10, 10], [2, 0], _chat_now("unrelated words"), None)
    assert values[0] > values[1] == 0.0
    values = worth(same, [10, 40], [0, 0], _chat_now("cabin"), None)
    assert values[0] == pytest.approx(2 * values[1])  # per square root of tokens


def _keep_order_reference(scores: list[float], positions: list[int], neighbors: int) -> list[int]:
    """keep_order as first written (sorts by lambda, every turn ranked): the optimized
    one must give the same ranks, ties included."""
    n = len(positions)
    newest_first = sorted(range(n), key=lambda i: -positions[i])
    by_position = sorted(range(n), key=lambda i: positions[i])
    slot = {c: k for k, c in enumerate(by_position)}
    seen: set[int] = set()
    sequence: list[int] = []
    for c in sorted(range(n), key=lambda i: (-scores[i], -positions[i])):
        if scores[c] <= 0.0:
            break
        around = [c]
        for step in range(1, neighbors + 1):
            around += [by_position[k] for k in (slot[c] - step, slot[c] + step) if 0 <= k < n]
        for member in around:
            if member not in seen:
                seen.add(member)
                sequence.append(member)
    sequence += [c for c in newest_first if c not in seen]
    rank = [0] * n
    for k, c in enumerate(sequence):
        rank[c] = k
    return rank


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 6), st.sampled_from(["zebra", "cat zebra", "dog", "zebra zebra"])),
        max_size=12,
    ),
    neighbors=st.integers(0, 2),
)
def test_history_keep_order_matches_the_reference(
    rows: list[tuple[int, str]], neighbors: int
) -> None:
    """Equal positions (blocks of one message), equal scores and neighbours: same ranks."""
    positions = [p for p, _ in rows]
    texts = [t for _, t in rows]
    scores = score_history("zebra", texts)
    want = _keep_order_reference(scores, positions, neighbors)
    order = keep_order(scores, positions, neighbors)
    rank = [0] * len(order)
    for k, c in enumerate(order):
        rank[c] = k
    assert rank == want
