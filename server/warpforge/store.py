"""SQLite store in the workspace (``.warpforge/warpforge.db``): the evaluation cache, and later jobs and
search memory.

Why SQLite: one file next to the user's code, no server, safe for the language server and a CLI run to use
at once (WAL mode), and it survives restarts so that identical work is never benchmarked twice: an
evaluation is keyed by (candidate hash, spec hash, GPU name, driver version), everything that decides its
outcome, and a hit is returned as is.

The schema is versioned with SQLite's ``user_version``: ``MIGRATIONS[i]`` takes a database from version
``i`` to ``i + 1``, applied in order inside one transaction each. A database written by a newer WarpForge
(higher version than this code knows) is refused rather than misread.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: MIGRATIONS[i] upgrades a database from user_version i to i + 1.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE evaluations (
        candidate_hash TEXT NOT NULL,
        spec_hash      TEXT NOT NULL,
        gpu            TEXT NOT NULL,
        driver         TEXT NOT NULL,
        kernel         TEXT NOT NULL,
        status         TEXT NOT NULL,
        speedup        REAL,
        result         TEXT NOT NULL,
        created        REAL NOT NULL,
        PRIMARY KEY (candidate_hash, spec_hash, gpu, driver)
    );
    CREATE INDEX evaluations_by_spec ON evaluations (spec_hash, status);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
DIRNAME = ".warpforge"
FILENAME = "warpforge.db"


class StoreError(RuntimeError):
    """The database cannot be used (newer schema, corrupt file); the message says what to do."""


@dataclass(frozen=True)
class EvalKey:
    candidate_hash: str
    spec_hash: str
    gpu: str
    driver: str


class Store:
    """A connection to one workspace database; safe to share between threads of one process."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(str(self.path), timeout=30.0, check_same_thread=False,
                                       isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA busy_timeout=30000")
            self._migrate()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: cannot use the WarpForge database ({e}); move it away to start afresh") \
                from e

    @classmethod
    def for_workspace(cls, root: str | Path) -> Store:
        """The store of the workspace rooted at ``root``."""
        return cls(Path(root) / DIRNAME / FILENAME)

    # ----------------------------------------------------------------- schema
    @property
    def version(self) -> int:
        with self._lock:
            row = self._db.execute("PRAGMA user_version").fetchone()
        return int(row[0])

    def _migrate(self) -> None:
        current = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        if current > SCHEMA_VERSION:
            raise StoreError(f"{self.path} was written by a newer WarpForge (schema {current}, this one knows "
                             f"{SCHEMA_VERSION}); upgrade WarpForge")
        for version in range(current, SCHEMA_VERSION):
            with self._transaction():
                for statement in _statements(MIGRATIONS[version]):
                    self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version = {version + 1}")

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # ----------------------------------------------------------------- evaluations
    def get_evaluation(self, key: EvalKey) -> dict[str, Any] | None:
        """The cached evaluation (as stored JSON), or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT result FROM evaluations WHERE candidate_hash=? AND spec_hash=? AND gpu=? AND driver=?",
                (key.candidate_hash, key.spec_hash, key.gpu, key.driver),
            ).fetchone()
        if row is None:
            return None
        data: dict[str, Any] = json.loads(row[0])
        return data

    def put_evaluation(self, key: EvalKey, kernel: str, status: str, speedup: float | None,
                       result: dict[str, Any]) -> None:
        text = json.dumps(result, sort_keys=True, allow_nan=False, default=str)
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO evaluations "
                "(candidate_hash, spec_hash, gpu, driver, kernel, status, speedup, result, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (key.candidate_hash, key.spec_hash, key.gpu, key.driver, kernel, status, speedup, text, time.time()),
            )

    def count_evaluations(self, spec_hash: str | None = None) -> int:
        with self._lock:
            if spec_hash is None:
                row = self._db.execute("SELECT COUNT(*) FROM evaluations").fetchone()
            else:
                row = self._db.execute("SELECT COUNT(*) FROM evaluations WHERE spec_hash=?", (spec_hash,)).fetchone()
        return int(row[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _statements(script: str) -> list[str]:
    """Split a migration script into statements (they contain no semicolons inside literals)."""
    return [s.strip() for s in script.split(";") if s.strip()]
