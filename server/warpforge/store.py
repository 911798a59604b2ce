"""The workspace store: one SQLite file per workspace, in the user's cache (``workspaces/NAME-HASH/warpforge.db``
under ``defaults.user_cache_dir()``), holding the evaluation cache, baseline profiles, search memory and the
LLM's lessons, and the one place that opens WarpForge's SQLite files.

Why one file and one front end: the three kinds of record describe the same work on the same kernels and
are written by the same jobs; kept apart they each grew their own connect code, their own table creation
and their own idea of where the file lives. Here the location is decided once (``workspace_db``), every
connection is made once (``connect``: WAL, a busy timeout, explicit transactions), and the schema has one
version number. ``search.memory.SearchMemory`` and ``policy.llm.reflector.LessonStore`` are views over a
``Store``: they own their queries, not a connection. The retrieval index (``rag/sqlite_fts.py``) is a
separate file in the user's cache (it is shared by all workspaces) but opens it with ``connect`` too.

Why in the user's cache and not in the workspace: a database and its WAL files in the user's repository show
up in ``git status`` and travel with copies of the folder, and a CLI run in another folder would silently
replay what that folder's file held. The file is keyed by the workspace's resolved path instead; ``--store``
and the editor's ``warpforge.storePath`` put it elsewhere, and a ``.warpforge`` folder, if one is ever used,
gets a ``.gitignore`` of ``*`` when it is created (``private_folder``).

Why SQLite: one file per workspace, no server, safe for the language server, a CLI run and
worker processes to write at once (WAL; writers wait up to ``BUSY_TIMEOUT_S`` for each other instead of
failing), and it survives restarts, so identical work is never benchmarked twice: an evaluation is keyed
by (candidate hash, spec hash, GPU name, driver version), everything that decides its outcome.

The schema is versioned with SQLite's ``user_version``: ``MIGRATIONS[i]`` takes a database from version
``i`` to ``i + 1``. Each runs in its own ``BEGIN IMMEDIATE`` transaction that re-reads the version first,
so two processes opening a fresh file at once migrate it once. A database written by a newer WarpForge
(higher version than this code knows) is refused rather than misread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sqlite3
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .defaults import user_cache_dir

#: MIGRATIONS[i] upgrades a database from user_version i to i + 1. Never edit a released entry: add one.
MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1: the evaluation cache.
    """
    CREATE TABLE IF NOT EXISTS evaluations (
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
    CREATE INDEX IF NOT EXISTS evaluations_by_spec ON evaluations (spec_hash, status);
    """,
    # 1 -> 2: search memory and lessons join the versioned schema. Before, each front end created its
    # table in this same file with IF NOT EXISTS outside any version, so both may already be there.
    """
    CREATE TABLE IF NOT EXISTS search_memory (
        kernel_key TEXT NOT NULL,
        family     TEXT NOT NULL,
        tries      INTEGER NOT NULL DEFAULT 0,
        wins       INTEGER NOT NULL DEFAULT 0,
        best       REAL NOT NULL DEFAULT 1.0,
        rejected   INTEGER NOT NULL DEFAULT 0,
        last_note  TEXT NOT NULL DEFAULT '',
        updated    REAL NOT NULL,
        PRIMARY KEY (kernel_key, family)
    );
    CREATE TABLE IF NOT EXISTS llm_lessons (
        kernel_key TEXT NOT NULL,
        family     TEXT NOT NULL,
        outcome    TEXT NOT NULL,
        lesson     TEXT NOT NULL,
        created    REAL NOT NULL
    );
    CREATE INDEX IF NOT EXISTS llm_lessons_key ON llm_lessons (kernel_key, created);
    """,
    # 2 -> 3: baseline profiles (Nsight Compute), made once and reused by later jobs on the same kernel text,
    # spec, build and GPU (``profile.reuse``). The report is zlib-compressed JSON: the parsed source page
    # alone is a megabyte of repeated counter names for a tiled SGEMM.
    """
    CREATE TABLE IF NOT EXISTS profiles (
        unit_hash TEXT NOT NULL,
        kernel    TEXT NOT NULL,
        spec_hash TEXT NOT NULL,
        build     TEXT NOT NULL,
        gpu       TEXT NOT NULL,
        driver    TEXT NOT NULL,
        ncu       TEXT NOT NULL,
        version   TEXT NOT NULL,
        report    BLOB NOT NULL,
        seconds   REAL NOT NULL,
        created   REAL NOT NULL,
        PRIMARY KEY (unit_hash, kernel, spec_hash, build, gpu, driver, ncu, version)
    );
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
#: a folder of WarpForge state inside a project (never made by default; see ``private_folder``)
DIRNAME = ".warpforge"
FILENAME = "warpforge.db"
#: the folder of per-workspace stores in the user's cache
WORKSPACES = "workspaces"
#: How long a writer waits for another process's transaction before giving up (an evaluation batch or a
#: migration takes milliseconds; the margin covers a slow network file system).
BUSY_TIMEOUT_S = 30.0
MEMORY = ":memory:"


class StoreError(RuntimeError):
    """The database cannot be used (newer schema, corrupt file); the message says what to do."""


@dataclass(frozen=True)
class EvalKey:
    candidate_hash: str
    spec_hash: str
    gpu: str
    driver: str


@dataclass(frozen=True)
class ProfileKey:
    """What decides a kernel's profile (made by ``profile.reuse.profile_key``; plain strings here, because the
    store sits below the profiler): the file, its translation unit and what the project's build adds
    (``unit_hash``), the kernel, the spec at the sizes profiled (``spec_hash``), the architecture, compiler
    and sections (``build``), the GPU as the evaluation cache names it (name and driver), the Nsight Compute
    version and the profiler's own version."""

    unit_hash: str
    kernel: str
    spec_hash: str
    build: str
    gpu: str
    driver: str
    ncu: str
    version: str


@dataclass(frozen=True)
class StoredProfile:
    """A profile report as stored (``ProfileReport.to_json()``), when it was made and what making it took."""

    report: dict[str, Any]
    created: float
    seconds: float


# --------------------------------------------------------------------------- location
def user_dir() -> Path:
    """WarpForge's per-user folder (``defaults.user_cache_dir``), for work outside a workspace."""
    return user_cache_dir()


def workspace_key(root: str | Path) -> str:
    """The folder name of a workspace's store: its name (readable) and a hash of its resolved path (unique)."""
    resolved = Path(root).expanduser().resolve()
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", resolved.name)[:40] or "root"
    digest = hashlib.sha256(str(resolved).encode("utf-8")).hexdigest()[:16]
    return f"{name}-{digest}"


def workspace_db(root: str | Path | None, override: str | Path | None = None) -> Path:
    """Where the store of the workspace rooted at ``root`` lives: ``workspaces/NAME-HASH/warpforge.db`` in the
    user's cache, never inside the workspace; with no workspace, the per-user ``warpforge.db``.

    ``override`` (``--store PATH``, the ``warpforge.storePath`` setting) wins: a folder (an existing one, or a
    path ending in a separator) gets ``warpforge.db`` inside it, anything else is the database file itself."""
    if override is not None and str(override).strip():
        text = str(override).strip()
        path = Path(text).expanduser()
        return path / FILENAME if path.is_dir() or text.endswith(("/", "\\")) else path
    if root is None:
        return user_dir() / FILENAME
    return user_dir() / WORKSPACES / workspace_key(root) / FILENAME


def private_folder(folder: Path) -> None:
    """Create ``folder`` (and its parents); a ``.warpforge`` folder gets a ``.gitignore`` of ``*`` so that what
    WarpForge writes there never shows up in ``git status``, whoever chose to put it in a repository."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in (folder, *folder.parents):
        if f.name == DIRNAME:
            ignore = f / ".gitignore"
            if not ignore.exists():
                # A read-only folder fails later, where the database is opened, with a clear message.
                with contextlib.suppress(OSError):
                    ignore.write_text("# written by WarpForge: nothing in this folder belongs in git\n*\n",
                                      encoding="utf-8")


# --------------------------------------------------------------------------- connections
def connect(path: str | Path) -> sqlite3.Connection:
    """Open a WarpForge SQLite file the one way every front end uses.

    Autocommit mode (``isolation_level=None``): Python's implicit transactions are off so that writes are
    grouped by ``transaction`` explicitly, with ``BEGIN IMMEDIATE`` taking the write lock up front (a
    deferred transaction that upgrades later can fail with "database is locked" without waiting). The busy
    timeout is set before switching to WAL, because that switch itself needs the lock. Shared between
    threads behind the owner's lock (``check_same_thread=False``). Rows are plain tuples.
    """
    where = str(path)
    if where != MEMORY:
        private_folder(Path(where).parent)
    db = sqlite3.connect(where, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    try:
        db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if where != MEMORY:
            _write_ahead_log(db)
        db.execute("PRAGMA foreign_keys = ON")  # enforce any reference a later migration declares
    except BaseException:
        db.close()
        raise
    return db


def _write_ahead_log(db: sqlite3.Connection) -> None:
    """Switch the file to WAL, retrying while another process holds the lock the switch needs.

    Two processes opening a new database at once can each hold a shared lock and each want the exclusive
    one the switch needs; SQLite then answers one of them "database is locked" at once instead of waiting
    (its busy handler would deadlock them), so the busy timeout alone does not cover this. Retried with a
    growing pause until the same timeout; a file already in WAL answers at once.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause = 0.01
    while True:
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            text = str(e).lower()
            if ("locked" not in text and "busy" not in text) or time.monotonic() >= deadline:
                raise
            time.sleep(pause)
            pause = min(2 * pause, 0.5)


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction on a ``connect``-ed connection: all of the block or none of it."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


# --------------------------------------------------------------------------- the store
class Store:
    """A connection to one workspace database; safe to share between threads of one process.

    ``path`` may be ``":memory:"`` for a one-off job that keeps nothing (its lessons, say).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self._db = connect(path)
        except (sqlite3.DatabaseError, OSError) as e:
            raise StoreError(f"{self.path}: cannot open the WarpForge database ({e}); {_advice(e)}") from e
        try:
            self._migrate()
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise StoreError(f"{self.path}: cannot use the WarpForge database ({e}); {_advice(e)}") from e
        except StoreError:
            self._db.close()
            raise

    @classmethod
    def for_workspace(cls, root: str | Path | None, override: str | Path | None = None) -> Store:
        """The store of the workspace rooted at ``root`` (the per-user one when there is no workspace), or the
        file ``override`` names (see ``workspace_db``)."""
        return cls(workspace_db(root, override))

    @classmethod
    def in_memory(cls) -> Store:
        """A private store that lives as long as the object (nothing is written to disk)."""
        return cls(MEMORY)

    # ----------------------------------------------------------------- schema
    @property
    def version(self) -> int:
        with self._lock:
            row = self._db.execute("PRAGMA user_version").fetchone()
        return int(row[0])

    def _check_version(self, current: int) -> None:
        if current > SCHEMA_VERSION:
            raise StoreError(f"{self.path} was written by a newer WarpForge (schema {current}, this one knows "
                             f"{SCHEMA_VERSION}); upgrade WarpForge, or move the file away to start afresh")

    def _migrate(self) -> None:
        """Apply the missing migrations, one transaction each; a no-op on an up-to-date file."""
        current = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        self._check_version(current)
        while current < SCHEMA_VERSION:
            with transaction(self._db):
                # Re-read under the write lock: another process may have migrated since we looked.
                current = int(self._db.execute("PRAGMA user_version").fetchone()[0])
                self._check_version(current)
                if current >= SCHEMA_VERSION:
                    break
                for statement in statements(MIGRATIONS[current]):
                    self._db.execute(statement)
                current += 1
                self._db.execute(f"PRAGMA user_version = {current}")

    # ----------------------------------------------------------------- access for views
    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The connection, held for this thread (for a query or a few)."""
        with self._lock:
            yield self._db

    @contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """The connection inside a write transaction, held for this thread."""
        with self._lock, transaction(self._db) as db:
            yield db

    # ----------------------------------------------------------------- evaluations
    def get_evaluation(self, key: EvalKey) -> dict[str, Any] | None:
        """The cached evaluation (as stored JSON), or None."""
        with self.reading() as db:
            row = db.execute(
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
        with self.writing() as db:
            db.execute(
                "INSERT OR REPLACE INTO evaluations "
                "(candidate_hash, spec_hash, gpu, driver, kernel, status, speedup, result, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (key.candidate_hash, key.spec_hash, key.gpu, key.driver, kernel, status, speedup, text, time.time()),
            )

    def count_evaluations(self, spec_hash: str | None = None) -> int:
        with self.reading() as db:
            if spec_hash is None:
                row = db.execute("SELECT COUNT(*) FROM evaluations").fetchone()
            else:
                row = db.execute("SELECT COUNT(*) FROM evaluations WHERE spec_hash=?", (spec_hash,)).fetchone()
        return int(row[0])

    # ----------------------------------------------------------------- profiles
    def get_profile(self, key: ProfileKey) -> StoredProfile | None:
        """The stored profile report for ``key``, or None (also for a row that no longer decodes)."""
        with self.reading() as db:
            row = db.execute(
                "SELECT report, created, seconds FROM profiles WHERE unit_hash=? AND kernel=? AND spec_hash=? AND "
                "build=? AND gpu=? AND driver=? AND ncu=? AND version=?", _profile_row(key)).fetchone()
        if row is None:
            return None
        try:
            data = json.loads(zlib.decompress(row[0]).decode("utf-8"))
        except (zlib.error, UnicodeDecodeError, ValueError):
            return None
        return StoredProfile(data, float(row[1]), float(row[2])) if isinstance(data, dict) else None

    def put_profile(self, key: ProfileKey, report: dict[str, Any], seconds: float) -> None:
        """Keep a profile report (``ProfileReport.to_json()``); ``seconds``: what measuring it took."""
        blob = zlib.compress(json.dumps(report, sort_keys=True, allow_nan=False).encode("utf-8"), 6)
        with self.writing() as db:
            db.execute(
                "INSERT OR REPLACE INTO profiles (unit_hash, kernel, spec_hash, build, gpu, driver, ncu, version, "
                "report, seconds, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*_profile_row(key), blob, seconds, time.time()))

    def count_profiles(self, kernel: str | None = None) -> int:
        with self.reading() as db:
            if kernel is None:
                row = db.execute("SELECT COUNT(*) FROM profiles").fetchone()
            else:
                row = db.execute("SELECT COUNT(*) FROM profiles WHERE kernel=?", (kernel,)).fetchone()
        return int(row[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _profile_row(key: ProfileKey) -> tuple[str, ...]:
    return (key.unit_hash, key.kernel, key.spec_hash, key.build, key.gpu, key.driver, key.ncu, key.version)


def _advice(e: BaseException) -> str:
    """What the user can do about a failure to open the file (a lock is not a reason to delete it)."""
    if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
        return f"another WarpForge process kept it locked for {BUSY_TIMEOUT_S:.0f} s; try again when it is done"
    if isinstance(e, OSError):
        return "check that the folder exists and is writable"
    return "move the file away to start afresh"


def statements(script: str) -> list[str]:
    """Split a migration script into statements (they contain no semicolons inside literals)."""
    return [s.strip() for s in script.split(";") if s.strip()]
