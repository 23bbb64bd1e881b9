"""The summary store: the SQLite implementation of the SummaryStore protocol."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from proxy.summaries.store import SqliteSummaryStore, open_store, sqlite_path


async def opened(path: Path) -> SqliteSummaryStore:
    store = SqliteSummaryStore(str(path))
    await store.start()
    return store


def test_sqlite_path() -> None:
    assert sqlite_path(None) == "summaries.sqlite3"
    assert sqlite_path("sqlite:///data/s.db") == "data/s.db"
    assert sqlite_path("sqlite:////var/lib/s.db") == "/var/lib/s.db"
    assert sqlite_path("plain/file.db") == "plain/file.db"
    with pytest.raises(ValueError, match="redis") as info:
        sqlite_path("redis://user:secret@host/0")
    assert "secret" not in str(info.value)
    with pytest.raises(ValueError):
        sqlite_path("sqlite:///")


async def test_put_get_many_and_missing(tmp_path: Path) -> None:
    store = await opened(tmp_path / "s.db")
    try:
        assert await store.get_many([]) == {}
        await store.put("a", "summary A")
        await store.put("b", "summary B")
        await store.put("a", "summary A2")  # a key is written again: the last text wins
        assert await store.get_many(["a", "b", "c"]) == {"a": "summary A2", "b": "summary B"}
    finally:
        await store.aclose()


async def test_many_keys_in_one_call(tmp_path: Path) -> None:
    store = await opened(tmp_path / "s.db")
    try:
        for i in range(0, 1200, 7):
            await store.put(f"k{i}", f"t{i}")
        got = await store.get_many([f"k{i}" for i in range(1200)])  # over the IN chunk size
        assert got == {f"k{i}": f"t{i}" for i in range(0, 1200, 7)}
    finally:
        await store.aclose()


async def test_survives_reopening_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "s.db"  # the folder is created
    store = await opened(path)
    await store.put("k", "kept across restarts")
    await store.aclose()
    again = await open_store(f"sqlite:///{path}")
    try:
        assert await again.get_many(["k"]) == {"k": "kept across restarts"}
    finally:
        await again.aclose()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_lock_is_exclusive_until_unlocked_or_expired(tmp_path: Path) -> None:
    one, two = await opened(tmp_path / "s.db"), await opened(tmp_path / "s.db")
    try:
        assert await one.try_lock("k", 60)
        assert not await two.try_lock("k", 60)  # another replica on the same file
        assert not await one.try_lock("k", 60)
        assert await two.try_lock("other", 60)
        await one.unlock("k")
        assert await two.try_lock("k", 60)
        assert await one.try_lock("short", 0.0)  # expires at once
        assert await two.try_lock("short", 60)
    finally:
        await one.aclose()
        await two.aclose()


async def test_concurrent_lockers_get_one_winner(tmp_path: Path) -> None:
    stores = [await opened(tmp_path / "s.db") for _ in range(4)]
    try:
        won = await asyncio.gather(*(s.try_lock("same", 60) for s in stores for _ in range(3)))
        assert sum(won) == 1
    finally:
        for s in stores:
            await s.aclose()


async def test_row_cap_prunes_oldest(tmp_path: Path) -> None:
    store = SqliteSummaryStore(str(tmp_path / "s.db"), max_rows=10)
    await store.start()
    try:
        for i in range(256):  # the cap is enforced every 256 puts
            await store.put(f"k{i:03}", "t")
        got = await store.get_many([f"k{i:03}" for i in range(256)])
        assert len(got) == 10
        assert "k255" in got and "k000" not in got
    finally:
        await store.aclose()


async def test_closed_store_raises(tmp_path: Path) -> None:
    store = await opened(tmp_path / "s.db")
    await store.aclose()
    with pytest.raises(RuntimeError):
        await store.get_many(["k"])
