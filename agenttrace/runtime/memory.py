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

Every failure of the file (not a SQLite database, locked by another process past the busy
timeout, not writable) raises `MemoryUnavailable` naming the file; a file that is not a database
stays unavailable for the store's life (a lock may clear, so a locked file is tried again on the
next call). The store never takes the process down and never loses what the agent holds.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from agenttrace.clock import Clock, default_clock
from agenttrace.errors import MemoryUnavailable

__all__ = ["ENGINE", "SHARED", "MemoryItem", "MemoryStore", "StoreCall", "fts_query"]

_log = logging.getLogger(__name__)
T = TypeVar("T")

ENGINE = "sqlite-fts5"
SHARED = "shared"  # the namespace every search reads (pre-seeded facts)
MAX_FACT_CHARS = 2000

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
    FTS5/BM25. Safe to share between threads (one connection behind a lock). `busy_timeout_s`
    bounds how long a call waits for a lock another process holds; `clock` times the store's own
    work (the telemetry's clock, so the times share the spans' time base)."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 1.0, clock: Clock | None = None) -> None:
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

        def write(conn: sqlite3.Connection) -> None:
            with conn:  # one transaction: all the facts or none
                conn.executemany("INSERT INTO memories(namespace, text, created_ns) VALUES (?, ?, ?)",
                                 [(namespace, t, now) for t in rows])

        _, seconds = self._run(write)
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
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, check_same_thread=False)
        try:
            conn.executescript(_SCHEMA)
        except BaseException:
            conn.close()
            raise
        return conn

    def _run(self, work: Callable[[sqlite3.Connection], T]) -> tuple[T, float]:
        """Run `work(conn)` under the lock: what it returned and the seconds it took inside
        SQLite. Every SQLite or OS failure becomes MemoryUnavailable naming the file."""
        if self._broken is not None:
            raise MemoryUnavailable(str(self.path), self._broken)
        with self._lock:
            t0 = self.clock.now_ns()
            try:
                if self._conn is None:
                    self._conn = self._connect()
                value = work(self._conn)
            except sqlite3.OperationalError as exc:
                reason = _reason(exc)
                if "locked" not in reason and "busy" not in reason:
                    self._drop_connection()
                raise MemoryUnavailable(str(self.path), reason) from exc
            except (sqlite3.DatabaseError, OSError) as exc:
                # not a database (or a damaged one), unreadable, a folder in the way: for good
                self._broken = _reason(exc)
                self._drop_connection()
                _log.warning("memory file %s cannot be used (%s); the agent goes on without memory", self.path,
                             self._broken)
                raise MemoryUnavailable(str(self.path), self._broken) from exc
            return value, (self.clock.now_ns() - t0) / 1e9

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
            self._conn = None


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, sqlite3.OperationalError) and "locked" in text:
        return "database is locked by another process (waited for the busy timeout)"
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in text:
        return "file is not a SQLite database (corrupt or another format)"
    return text
