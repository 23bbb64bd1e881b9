"""Summary store: where proxy-made summaries live across restarts (embedded SQLite by default)."""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

DEFAULT_URL = "sqlite:///summaries.sqlite3"  # ./summaries.sqlite3
_IN_CHUNK = 500  # keys per SELECT ... IN (...): under SQLite's bound-parameter limit
_PRUNE_EVERY = 256  # puts between checks of the row cap
MAX_ROWS = 200_000  # oldest summaries beyond this are deleted, so the file stays bounded
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS summaries ("
    " key TEXT PRIMARY KEY, text TEXT NOT NULL, created REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS summaries_created ON summaries (created)",
    "CREATE TABLE IF NOT EXISTS locks (key TEXT PRIMARY KEY, until REAL NOT NULL)",
)

T = TypeVar("T")


class SummaryStore(Protocol):
    async def get_many(self, keys: Sequence[str]) -> dict[str, str]: ...

    async def put(self, key: str, text: str) -> None: ...

    async def try_lock(self, key: str, ttl_s: float) -> bool: ...  # one payer per summary

    async def unlock(self, key: str) -> None: ...

    async def aclose(self) -> None: ...


def sqlite_path(url: str | None) -> str:
    """The file of a `sqlite:///path` URL, SQLAlchemy's way: `sqlite:///rel/x` is relative
    to the working directory, `sqlite:////abs/x` absolute; a bare path is taken as is."""
    url = url or DEFAULT_URL
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :]
        if path:
            return path
    elif "://" not in url:
        return url
    # Only the scheme is named: a store URL may carry a password.
    raise ValueError(f"unsupported summary store {url.split(':', 1)[0]!r}: use sqlite:///PATH")


async def open_store(url: str | None) -> SummaryStore:
    """The store named by a policy's `summaries.store` (None: ./summaries.sqlite3)."""
    store = SqliteSummaryStore(sqlite_path(url))
    await store.start()
    return store


class _Worker:
    """One SQLite connection, used only from its own thread: calls never block the loop,
    and the thread serializes them."""

    def __init__(self, path: str, name: str) -> None:
        self.path = path
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self.db: sqlite3.Connection | None = None

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, functools.partial(fn, *args))

    def open(self, busy_ms: int) -> None:
        # Autocommit mode: every transaction below is explicit (BEGIN IMMEDIATE for locks).
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: a crash loses no commit
        self.db = db

    def conn(self) -> sqlite3.Connection:
        if self.db is None:
            raise RuntimeError("summary store is closed")
        return self.db

    async def aclose(self) -> None:
        if self.db is not None:
            await self.run(self._close)
        self.pool.shutdown(wait=False)

    def _close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None


class SqliteSummaryStore:
    """Two connections on two threads: reads (the request path) never queue behind a write
    or a lock waiting for another process; WAL lets readers and one writer run together
    and several proxy processes share the file."""

    def __init__(self, path: str, *, max_rows: int = MAX_ROWS) -> None:
        self.path = path
        self.max_rows = max_rows
        self._reader = _Worker(path, "summary-read")
        self._writer = _Worker(path, "summary-write")
        self._puts = 0

    async def start(self) -> None:
        await self._writer.run(self._create)
        await self._reader.run(self._reader.open, 1000)

    def _create(self) -> None:
        folder = os.path.dirname(self.path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        self._writer.open(5000)
        for statement in _SCHEMA:
            self._writer.conn().execute(statement)

    async def get_many(self, keys: Sequence[str]) -> dict[str, str]:
        if not keys:
            return {}
        return await self._reader.run(self._get_many, list(keys))

    def _get_many(self, keys: list[str]) -> dict[str, str]:
        db = self._reader.conn()
        out: dict[str, str] = {}
        for i in range(0, len(keys), _IN_CHUNK):
            chunk = keys[i : i + _IN_CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = db.execute(f"SELECT key, text FROM summaries WHERE key IN ({marks})", chunk)
            out.update({str(k): str(t) for k, t in rows})
        return out

    async def put(self, key: str, text: str) -> None:
        await self._writer.run(self._put, key, text)

    def _put(self, key: str, text: str) -> None:
        db = self._writer.conn()
        db.execute(
            "INSERT OR REPLACE INTO summaries (key, text, created) VALUES (?, ?, ?)",
            (key, text, time.time()),
        )
        self._puts += 1
        if self._puts % _PRUNE_EVERY == 0:
            db.execute(
                "DELETE FROM summaries WHERE key IN (SELECT key FROM summaries"
                " ORDER BY created DESC LIMIT -1 OFFSET ?)",
                (self.max_rows,),
            )

    async def try_lock(self, key: str, ttl_s: float) -> bool:
        return await self._writer.run(self._try_lock, key, ttl_s)

    def _try_lock(self, key: str, ttl_s: float) -> bool:
        db = self._writer.conn()
        now = time.time()
        # IMMEDIATE takes the write lock first, so two processes cannot both see "free".
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("DELETE FROM locks WHERE until <= ?", (now,))  # expired: free again
            cur = db.execute(
                "INSERT OR IGNORE INTO locks (key, until) VALUES (?, ?)", (key, now + ttl_s)
            )
            taken = cur.rowcount == 1
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return taken

    async def unlock(self, key: str) -> None:
        await self._writer.run(self._unlock, key)

    def _unlock(self, key: str) -> None:
        self._writer.conn().execute("DELETE FROM locks WHERE key = ?", (key,))

    async def aclose(self) -> None:
        await self._reader.aclose()
        await self._writer.aclose()
