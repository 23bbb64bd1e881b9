"""The heavy-plan slot: one holder at a time, the teams waiting served in turn, a waiter
that goes (cancelled, or cancelled as the slot reached it) never keeps the slot."""

from __future__ import annotations

import asyncio

import pytest

from proxy.server.core.fair_slot import FairSlot


async def test_teams_waiting_take_the_slot_in_turn() -> None:
    slot, order = FairSlot(), []
    gate = asyncio.Event()

    async def work(team: str, k: int) -> None:
        async with slot.hold(team):
            if not order:
                await gate.wait()
            order.append(f"{team}{k}")

    tasks = [asyncio.create_task(work("a", k)) for k in range(4)]
    await asyncio.sleep(0)
    tasks += [asyncio.create_task(work("b", 0)), asyncio.create_task(work("c", 0))]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(*tasks)
    # a0 held it; then one each of a, b, c in the order they came; then a's rest
    assert order == ["a0", "a1", "b0", "c0", "a2", "a3"]
    assert slot.waiting == 0


async def test_one_holder_at_a_time_and_cancelled_waiters_let_go() -> None:
    slot, inside, most = FairSlot(), 0, 0

    async def work(team: str) -> None:
        nonlocal inside, most
        async with slot.hold(team):
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.001)
            inside -= 1

    tasks = [asyncio.create_task(work(t)) for t in "abcabcabc"]
    await asyncio.sleep(0)
    tasks[4].cancel()
    tasks[7].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert most == 1
    assert sum(isinstance(r, asyncio.CancelledError) for r in results) == 2
    async with slot.hold("z"):  # free again
        pass
    assert slot.waiting == 0


async def test_a_waiter_cancelled_as_the_slot_reaches_it_passes_it_on() -> None:
    slot = FairSlot()
    release = asyncio.Event()

    async def first() -> None:
        async with slot.hold("a"):
            await release.wait()

    holder = asyncio.create_task(first())
    await asyncio.sleep(0)
    second = asyncio.create_task(_enter(slot, "b"))
    third = asyncio.create_task(_enter(slot, "c"))
    await asyncio.sleep(0)
    release.set()
    second.cancel()  # cancelled in the same turn the slot is handed to it
    await holder
    with pytest.raises(asyncio.CancelledError):
        await second
    await asyncio.wait_for(third, 1)  # the slot went on to c


async def _enter(slot: FairSlot, team: str) -> None:
    async with slot.hold(team):
        await asyncio.sleep(0)
