"""The embedded retrieval backend: SQLite FTS5 with BM25, one file in the user's cache directory.

Why keyword search and not embeddings by default: it needs no service, no model download and no key,
works offline on the CPU machine and in CI, and for code the words that matter — op names (softmax,
gemm), identifiers (``warp_reduce_sum``), intrinsics (``__shfl_xor_sync``) — are exact tokens that BM25
ranks well. Identifiers are split into words (``blockReduceSum`` → block reduce sum) and the Porter
stemmer folds plurals (rows → row), so prose queries meet code. Columns are weighted: name words above
op type above pattern tags above the body.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ..store import connect, statements, transaction
from .index import Chunk, Hit, Query, split_identifier

SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (
    id         TEXT PRIMARY KEY,
    source     TEXT NOT NULL,
    path       TEXT NOT NULL,
    name       TEXT NOT NULL,
    kind       TEXT NOT NULL,
    op_type    TEXT NOT NULL,
    tags       TEXT NOT NULL,
    weight     REAL NOT NULL,
    start_line INTEGER NOT NULL,
    end_line   INTEGER NOT NULL,
    text       TEXT NOT NULL,
    added      REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_source ON chunks (source);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    id UNINDEXED, name_words, op_type, tags, body, tokenize = 'porter unicode61'
);
"""

#: bm25 column weights: id (unindexed), name words, op type, tags, body
BM25_WEIGHTS = (0.0, 10.0, 6.0, 3.0, 1.0)


def _body_words(text: str) -> str:
    """The code plus its identifiers split into words (camelCase is one token to unicode61 otherwise)."""
    extra: list[str] = []
    for tok in set(text.replace("(", " ").replace(")", " ").split()):
        if any(c.isupper() for c in tok[1:]) and tok.isidentifier():
            extra.extend(split_identifier(tok))
    return text + "\n" + " ".join(sorted(set(extra)))


class SqliteBackend:
    name = "sqlite"

    def __init__(self, path: str | Path) -> None:
        # The index is its own file (in the user's cache, shared by every workspace) but is opened the way
        # the workspace store is: one connection, WAL, a busy timeout, explicit write transactions.
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = connect(self.path)
        with transaction(self._db) as db:
            for statement in statements(SCHEMA):
                db.execute(statement)

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self._db

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        with self._lock, transaction(self._db) as db:
            yield db

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(self, chunks: Sequence[Chunk]) -> int:
        now = time.time()
        with self._writing() as db:
            for c in chunks:
                db.execute("DELETE FROM chunks_fts WHERE id = ?", (c.id,))
                db.execute(
                    """INSERT OR REPLACE INTO chunks (id, source, path, name, kind, op_type, tags, weight,
                       start_line, end_line, text, added) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    (c.id, c.source, c.path, c.name, c.kind, c.op_type, " ".join(c.tags), c.weight, c.start_line,
                     c.end_line, c.text, now))
                db.execute("INSERT INTO chunks_fts (id, name_words, op_type, tags, body) VALUES (?, ?, ?, ?, ?)",
                           (c.id, c.words, c.op_type, " ".join(t.replace("_", " ") for t in c.tags),
                            _body_words(c.text)))
        return len(chunks)

    def remove_source(self, source: str) -> int:
        with self._writing() as db:
            ids = [r[0] for r in db.execute("SELECT id FROM chunks WHERE source = ?", (source,))]
            db.executemany("DELETE FROM chunks_fts WHERE id = ?", [(i,) for i in ids])
            db.execute("DELETE FROM chunks WHERE source = ?", (source,))
        return len(ids)

    def search(self, query: Query, limit: int) -> list[Hit]:
        terms = query.terms()
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', "") + '"' for t in terms)
        w = ", ".join(str(x) for x in BM25_WEIGHTS)
        with self._reading() as db:
            rows = db.execute(
                f"""SELECT c.id, c.source, c.path, c.name, c.kind, c.op_type, c.tags, c.weight, c.start_line,
                           c.end_line, c.text, bm25(chunks_fts, {w}) AS score
                    FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.id
                    WHERE chunks_fts MATCH ? ORDER BY score LIMIT ?""",
                (match, int(limit))).fetchall()
        hits: list[Hit] = []
        for r in rows:
            chunk = Chunk(r[0], r[1], r[2], r[3], r[4], r[5], tuple(t for t in str(r[6]).split() if t), float(r[7]),
                          int(r[8]), int(r[9]), r[10])
            raw = -float(r[11])  # bm25() is lower-is-better
            hits.append(Hit(chunk, raw, raw))
        return hits

    def count(self) -> int:
        with self._reading() as db:
            return int(db.execute("SELECT count(*) FROM chunks").fetchone()[0])

    def sources(self) -> dict[str, int]:
        with self._reading() as db:
            return {str(s): int(n) for s, n in db.execute("SELECT source, count(*) FROM chunks GROUP BY source")}
