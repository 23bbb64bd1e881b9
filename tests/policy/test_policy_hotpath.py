"""Policy costs on the request path: derived flags computed once, a sparing file watcher."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from proxy.policy import Policy, PolicySet, PolicyStore
from proxy.policy import store as store_module
from proxy.policy.model import hash_key


def test_open_mode_and_admin_required_are_computed_once(monkeypatch: Any) -> None:
    keyed = Policy(team="a", keys=(hash_key("k"),))
    admin = Policy(team="b", admin_keys=(hash_key("adm"),))
    sets = [PolicySet(Policy()), PolicySet(Policy(), (keyed,)), PolicySet(Policy(), (admin,))]
    calls: list[int] = []
    monkeypatch.setattr(PolicySet, "all", lambda self: calls.append(1) or ())
    flags = [(s.open_mode, s.admin_required) for s in sets for _ in range(3)]
    assert calls == []  # the old properties walked every policy on each access
    assert flags == [(True, False)] * 3 + [(False, False)] * 3 + [(True, True)] * 3


def test_derived_flags_follow_replace_and_stay_out_of_equality() -> None:
    open_set = PolicySet(Policy())
    keyed = dataclasses.replace(open_set, policies=(Policy(team="a", keys=(hash_key("k"),)),))
    assert open_set.open_mode and not keyed.open_mode
    assert PolicySet(Policy()) == open_set
    assert "open_mode" not in repr(open_set)


def test_watcher_wakes_at_most_a_few_times_a_second(monkeypatch: Any, tmp_path: Path) -> None:
    """watchfiles' default step (50 ms) takes the GIL 20 times a second to look at the
    stop event; the watcher asks for a step of at least 250 ms."""
    seen: dict[str, Any] = {}

    async def fake_awatch(*paths: Any, **options: Any) -> AsyncIterator[set[Any]]:
        seen.update(options)
        await options["stop_event"].wait()
        return
        yield set()  # an async generator, as awatch is

    import watchfiles

    monkeypatch.setattr(watchfiles, "awatch", fake_awatch)
    (tmp_path / "p.yaml").write_text("budget: {ratio: 0.5}\n")
    store = PolicyStore.load(str(tmp_path))

    async def main() -> None:
        stop = asyncio.Event()
        watcher = asyncio.ensure_future(store.watch(stop))
        await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait_for(watcher, 5)

    asyncio.run(main())
    assert seen.get("step", 50) >= 250
    # ... and a saved policy file is still picked up within about a second.
    assert 250 <= store_module.WATCH_STEP_MS <= 1000
