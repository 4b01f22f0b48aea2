"""Long-term memory: facts an agent stores and searches, in a SQLite file with an FTS5 index
ranked by BM25.

Why SQLite FTS5: it ships with Python's sqlite3 (no server, no extra dependency), keeps every
fact in one file under the run's folder that any SQLite tool can open, and ranks by BM25 in C.
Measured on this project's machine (2 cores, BENCHMARKS.md "Memory, compaction and
delegation"): a search over 2,200 facts takes about 1.7 ms (p50) and storing one about 0.9 ms
(its own transaction), against a model call of a second: the store is cheap; what memory costs an
agent is mostly the step it takes to ask for it.

Facts live in namespaces: `shared` (pre-seeded, read by everyone) and one per agent or per task
run, so a benchmark's arms and repeats never see each other's writes. A search reads `shared`
and the caller's own namespace.

Many writers share one file (processes of a benchmark, threads each holding a store): the file is
in WAL mode (readers never wait for a writer), every write is its own `BEGIN IMMEDIATE`
transaction (it takes the write lock first, so two writers never deadlock upgrading a read
lock), and a write that finds the lock taken waits in SQLite's busy handler and is retried, the
whole transaction, until `busy_timeout_s` has passed. Contention is recognised by SQLite's error
code, not its message: FTS5 reports a busy file while it connects as "vtable constructor failed".
The schema is created once, under the write lock, by whichever store comes first.

Every failure of the file (not a SQLite database, still locked after the busy timeout, not
writable) raises `MemoryUnavailable` naming the file; a file that is not a database stays
unavailable for the store's life (a lock may clear, so a locked file is tried again on the next
call). The store never takes the process down and never loses what the agent holds.
"""

from __future__ import annotations

import logging
import random
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from agenttrace.clock import Clock, default_clock, elapsed_s
from agenttrace.errors import MemoryUnavailable

__all__ = ["ENGINE", "SHARED", "MemoryItem", "MemoryStore", "StoreCall", "fts_query"]

_log = logging.getLogger(__name__)
T = TypeVar("T")

# SQLite's primary result codes for "another connection holds the lock" (extended codes such as
# SQLITE_BUSY_SNAPSHOT keep these in their low byte).
_BUSY_CODES = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED
_READONLY = 8  # SQLITE_READONLY: a read-only file keeps its journal mode and can still be searched
_RETRY_PAUSE_S = 0.005  # before retrying a transaction SQLite refused without waiting (jittered)

ENGINE = "sqlite-fts5"
SHARED = "shared"  # the namespace every search reads (pre-seeded facts)
MAX_FACT_CHARS = 2000

_SCHEMA_NAMES = ("memories", "memories_namespace", "memories_fts", "memories_ai", "memories_ad")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
    id INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    text TEXT NOT NULL,
    created_ns INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS memories_namespace ON memories(namespace);
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
    text, content='memories', content_rowid='id', tokenize='porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER IF NOT EXISTS memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
"""

# Words that match everywhere and rank nothing: left out of the query (BM25 weighs them down
# anyway, but an OR over them alone would return every fact).
_STOPWORDS = frozenset(
    "a an and are as at be by can did do does for from had has have how i in is it its me my of on or "
    "our please tell that the their them then this to was what when where which who why will with you your".split()
)


def fts_query(text: str) -> str | None:
    """An FTS5 query for free text: its words (stopwords left out), each quoted, joined by OR, so
    BM25 ranks facts by how many of the words they hold and how rare those are. None when no
    word is left (nothing to search for)."""
    words = [w for w in re.findall(r"\w+", text.casefold()) if w not in _STOPWORDS]
    words = list(dict.fromkeys(words))[:32]
    if not words:
        return None
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


@dataclass(frozen=True)
class MemoryItem:
    text: str
    namespace: str
    score: float  # BM25 relevance (higher is more relevant); 0 for items not found by a search


@dataclass(frozen=True)
class StoreCall:
    """What one store operation did: the items found (search) or written (create), their text's
    size in bytes, and the time spent inside SQLite (s)."""

    items: tuple[MemoryItem, ...]
    bytes: int
    store_s: float


class MemoryStore:
    """Facts in a SQLite file at `path` (created with its folder when missing), searched with
    FTS5/BM25. Safe to share between threads (one connection behind a lock) and between stores and
    processes on the same file (SQLite's locks). `busy_timeout_s` bounds how long a call waits for
    a lock another connection holds (a write takes well under a millisecond, so only a stuck
    writer makes a call wait that long); `clock` times the store's own work (the telemetry's
    clock, so the times share the spans' time base)."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 5.0, clock: Clock | None = None) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self.clock = clock if clock is not None else default_clock()
        self._own_clock = clock is not None
        self._conn: sqlite3.Connection | None = None
        self._broken: str | None = None  # why the file can never be used (not a database)
        self._lock = threading.Lock()

    def bind_clock(self, clock: Clock) -> None:
        """Time the store's work on `clock` (the agent's telemetry clock) unless this store was
        given a clock of its own."""
        if not self._own_clock:
            self.clock = clock

    # -- state -------------------------------------------------------------------------------
    @property
    def unavailable(self) -> str | None:
        """Why the file cannot be used at all, or None (a lock is not remembered: it may clear)."""
        return self._broken

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- operations --------------------------------------------------------------------------
    def add(self, text: str, *, namespace: str = SHARED) -> StoreCall:
        """Store one fact; MemoryUnavailable when the file cannot be written."""
        text = text.strip()[:MAX_FACT_CHARS]
        if not text:
            raise ValueError("a memory needs some text")
        return self.add_many([text], namespace=namespace)

    def add_many(self, texts: Iterable[str], *, namespace: str = SHARED) -> StoreCall:
        rows = [t.strip()[:MAX_FACT_CHARS] for t in texts if t.strip()]
        now = self.clock.now_ns()

        def write(conn: sqlite3.Connection) -> None:  # in one transaction: all the facts or none
            conn.executemany("INSERT INTO memories(namespace, text, created_ns) VALUES (?, ?, ?)",
                             [(namespace, t, now) for t in rows])

        _, seconds = self._run(write, write=True)
        items = tuple(MemoryItem(t, namespace, 0.0) for t in rows)
        return StoreCall(items, sum(len(t.encode()) for t in rows), seconds)

    def search(self, query: str, *, namespaces: Sequence[str] = (SHARED,), limit: int = 5) -> StoreCall:
        """The facts of `namespaces` best matching `query` by BM25, best first, at most `limit`."""
        match = fts_query(query)
        if match is None or limit <= 0:
            return StoreCall((), 0, 0.0)
        spaces = list(dict.fromkeys(namespaces))
        marks = ",".join("?" * len(spaces))
        sql = (f"SELECT m.text, m.namespace, bm25(memories_fts) AS rank FROM memories_fts "
               f"JOIN memories m ON m.id = memories_fts.rowid "
               f"WHERE memories_fts MATCH ? AND m.namespace IN ({marks}) ORDER BY rank LIMIT ?")
        found, seconds = self._run(lambda conn: conn.execute(sql, [match, *spaces, int(limit)]).fetchall())
        # SQLite's bm25() is negated (lower is better); the item's score is the usual positive one
        items = tuple(MemoryItem(text, ns, -float(rank)) for text, ns, rank in found)
        return StoreCall(items, sum(len(i.text.encode()) for i in items), seconds)

    def count(self, namespace: str | None = None) -> int:
        if namespace is None:
            sql, args = "SELECT COUNT(*) FROM memories", ()
        else:
            sql, args = "SELECT COUNT(*) FROM memories WHERE namespace = ?", (namespace,)
        n, _ = self._run(lambda conn: conn.execute(sql, args).fetchone()[0])
        return n

    def seed(self, texts: Iterable[str], *, namespace: str = SHARED) -> int:
        """Store `texts` in `namespace` unless it holds facts already (a resumed run's store is
        seeded once); returns how many were written."""
        texts = list(texts)
        if not texts or self.count(namespace):
            return 0
        return len(self.add_many(texts, namespace=namespace).items)

    # -- the connection ----------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit: the store opens its transactions itself (BEGIN IMMEDIATE for a write).
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None,
                               check_same_thread=False)
        try:
            _use_wal(conn)
            _create_schema(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _run(self, work: Callable[[sqlite3.Connection], T], *, write: bool = False) -> tuple[T, float]:
        """Run `work(conn)` under the lock, in a write transaction when `write`: what it
        returned and the seconds it took inside SQLite. A call another connection's lock refuses
        is retried whole; no retry starts after `busy_timeout_s`. Every SQLite or OS failure becomes
        MemoryUnavailable naming the file."""
        if self._broken is not None:
            raise MemoryUnavailable(str(self.path), self._broken)
        with self._lock:
            t0 = self.clock.now_ns()
            # The deadline is real time (SQLite's busy handler waits in real time), whatever
            # clock times the store's work.
            wall, started = default_clock(), default_clock().now_ns()
            while True:
                try:
                    return self._attempt(work, write), (self.clock.now_ns() - t0) / 1e9
                except sqlite3.OperationalError as exc:
                    if not _is_busy(exc):
                        self._drop_connection()
                        raise MemoryUnavailable(str(self.path), _reason(exc)) from exc
                    left = self.busy_timeout_s - elapsed_s(wall, started)
                    if left <= 0:
                        raise MemoryUnavailable(
                            str(self.path), f"database is locked by another writer (waited {self.busy_timeout_s:g} s)"
                        ) from exc
                    # Refused at once (SQLite skips its busy handler where waiting could deadlock):
                    # wait a little, jittered so retrying writers do not collide again.
                    time.sleep(min(left, _RETRY_PAUSE_S * (1 + random.random())))
                except (sqlite3.DatabaseError, OSError) as exc:
                    # not a database (or a damaged one), unreadable, a folder in the way: for good
                    self._broken = _reason(exc)
                    self._drop_connection()
                    _log.warning("memory file %s cannot be used (%s); the agent goes on without memory", self.path,
                                 self._broken)
                    raise MemoryUnavailable(str(self.path), self._broken) from exc

    def _attempt(self, work: Callable[[sqlite3.Connection], T], write: bool) -> T:
        if self._conn is None:
            self._conn = self._connect()
        conn = self._conn
        if not write:
            return work(conn)
        conn.execute("BEGIN IMMEDIATE")  # the write lock now, or wait for it here
        try:
            value = work(conn)
            conn.execute("COMMIT")  # a refused COMMIT leaves the transaction open: rolled back below
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return value

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
            self._conn = None


def _is_busy(exc: sqlite3.Error) -> bool:
    """Whether SQLite refused because another connection holds a lock (whatever its message)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:  # not from SQLite's C API (Python's own checks)
        return False
    return code & 0xFF in _BUSY_CODES


def _use_wal(conn: sqlite3.Connection) -> None:
    """Put the file in WAL mode (it stays so; readers then never wait for a writer). A
    read-only file keeps its mode: it can still be searched."""
    try:
        conn.execute("PRAGMA journal_mode=WAL").fetchone()
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF != _READONLY:
            raise


def _create_schema(conn: sqlite3.Connection) -> None:
    """Create the tables once: a file that has them is only read; otherwise under the write lock,
    so stores opening a new file together do not race to create the FTS5 table."""
    present = conn.execute(
        f"SELECT COUNT(*) FROM sqlite_master WHERE name IN ({','.join('?' * len(_SCHEMA_NAMES))})", _SCHEMA_NAMES
    ).fetchone()[0]
    if present == len(_SCHEMA_NAMES):
        return
    try:
        # One script (executescript commits an open transaction before it runs); IF NOT EXISTS:
        # whoever took the lock first created them.
        conn.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}COMMIT;")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in text:
        return "file is not a SQLite database (corrupt or another format)"
    return text
