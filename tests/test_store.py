"""The workspace store: migrations from the files today's WarpForge writes, the three views in one file,
refusal of a newer schema, and several processes writing at once (real SQLite files, real processes)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from warpforge.policy.llm.reflector import Lesson, LessonStore
from warpforge.rag.index import Chunk
from warpforge.rag.sqlite_fts import SqliteBackend
from warpforge.search.memory import SearchMemory
from warpforge.store import SCHEMA_VERSION, EvalKey, Store, StoreError, workspace_db

SERVER = Path(__file__).resolve().parents[1] / "server"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workspace stores live in the user's cache: each test gets its own, never the real one."""
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path / "user-cache"))

# Today's schema, copied as it stood before the store owned all three tables: the evaluation cache was
# user_version 1, while search memory and lessons created their tables in the same file with IF NOT EXISTS
# and never touched the version (so a file they made first sits at version 0).
V1_EVALUATIONS = """
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
"""
V0_SEARCH_MEMORY = """
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
"""
V0_LESSONS = """
CREATE TABLE IF NOT EXISTS llm_lessons (
    kernel_key TEXT NOT NULL,
    family     TEXT NOT NULL,
    outcome    TEXT NOT NULL,
    lesson     TEXT NOT NULL,
    created    REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS llm_lessons_key ON llm_lessons (kernel_key, created);
"""
KEY = EvalKey("cand", "spec", "NVIDIA H100 80GB HBM3", "580.65")


def _today_db(path: Path, *, with_evaluations: bool) -> None:
    """A file as today's code leaves it: memory and lessons rows, and the evaluation cache when it ran."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.executescript(V0_SEARCH_MEMORY + V0_LESSONS)
    db.execute("INSERT INTO search_memory (kernel_key, family, tries, wins, best, updated) "
               "VALUES ('k1', 'vectorize', 3, 2, 1.7, 1.0)")
    db.execute("INSERT INTO llm_lessons VALUES ('k1', 'vectorize', 'faster', 'float4 loads halved the time', 1.0)")
    if with_evaluations:
        db.executescript(V1_EVALUATIONS)
        db.execute("INSERT INTO evaluations VALUES (?, ?, ?, ?, 'saxpy', 'ok', 1.25, '{\"speedup\": 1.25}', 1.0)",
                   (KEY.candidate_hash, KEY.spec_hash, KEY.gpu, KEY.driver))
        db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()


def _schema(path: Path) -> list[tuple[str, str]]:
    db = sqlite3.connect(path)
    try:
        return [(str(n), str(s)) for n, s in db.execute("SELECT name, sql FROM sqlite_master ORDER BY name")]
    finally:
        db.close()


@pytest.mark.parametrize("with_evaluations", [True, False], ids=["version1", "version0"])
def test_a_database_written_today_migrates_and_keeps_its_rows(tmp_path: Path, with_evaluations: bool) -> None:
    path = workspace_db(tmp_path)
    _today_db(path, with_evaluations=with_evaluations)
    with Store(path) as store:
        assert store.version == SCHEMA_VERSION
        assert SearchMemory(store).summary("k1") == {"vectorize": (3, 2, 1.7)}
        assert LessonStore(store).recent("k1") == [Lesson("vectorize", "faster", "float4 loads halved the time")]
        if with_evaluations:
            assert store.get_evaluation(KEY) == {"speedup": 1.25}
        else:  # the evaluation cache is created by the migration, empty and usable
            assert store.count_evaluations() == 0
            store.put_evaluation(KEY, "saxpy", "ok", 1.1, {"speedup": 1.1})
            assert store.get_evaluation(KEY) == {"speedup": 1.1}


def test_reopening_migrates_nothing_and_keeps_everything(tmp_path: Path) -> None:
    path = workspace_db(tmp_path)
    _today_db(path, with_evaluations=True)
    Store(path).close()
    schema = _schema(path)
    with Store(path) as again:
        assert again.version == SCHEMA_VERSION
        assert again.get_evaluation(KEY) == {"speedup": 1.25}
        assert SearchMemory(again).summary("k1") == {"vectorize": (3, 2, 1.7)}
    assert _schema(path) == schema


def test_a_newer_schema_is_refused_with_what_to_do_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE from_the_future (x)")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    with pytest.raises(StoreError) as e:
        Store(path)
    message = str(e.value)
    assert str(path) in message and "newer WarpForge" in message and "upgrade WarpForge" in message
    assert "\n" not in message
    assert [n for n, _ in _schema(path)] == ["from_the_future"]


def test_a_file_that_is_not_a_database_is_refused_and_kept(tmp_path: Path) -> None:
    path = workspace_db(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a database, but somebody's bytes" * 100)
    with pytest.raises(StoreError, match="move the file away"):
        Store(path)
    assert path.read_bytes().startswith(b"not a database")


def test_evaluations_memory_and_lessons_share_one_file(tmp_path: Path) -> None:
    store = Store.for_workspace(tmp_path)
    assert store.path == workspace_db(tmp_path)
    memory, lessons = SearchMemory(store), LessonStore(store)
    store.put_evaluation(KEY, "saxpy", "ok", 1.3, {"speedup": 1.3})
    memory.record("k2", "unroll", True, 1.2, "unrolled by 4")
    memory.record_rejection("k2", "block_size")
    lessons.add("k2", [Lesson("unroll", "faster", "unrolling hid the load latency")])
    assert memory.path == lessons.path == store.path
    store.close()

    # a second process's view of the file: every table in the one database, and no other database beside it
    db = sqlite3.connect(store.path)
    counts = {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
              for t in ("evaluations", "search_memory", "llm_lessons")}
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
    assert counts == {"evaluations": 1, "search_memory": 2, "llm_lessons": 1}
    assert sorted(p.name for p in store.path.parent.iterdir() if not p.name.endswith(("-wal", "-shm"))) == \
        ["warpforge.db"]

    # views given a path open the same store file
    assert SearchMemory(store.path).summary("k2")["unroll"] == (1, 1, 1.2)
    assert LessonStore(store.path).recent("k2")[0].family == "unroll"


def test_lessons_without_a_workspace_live_in_memory_only(tmp_path: Path) -> None:
    lessons = LessonStore()
    lessons.add("k", [Lesson("tile", "slower", "the tile did not fit in shared memory")])
    assert [x.outcome for x in lessons.recent("k")] == ["slower"]
    assert str(lessons.path) == ":memory:"
    assert not any(tmp_path.iterdir())


def test_the_location_is_decided_in_one_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path / "cache"))
    assert workspace_db(tmp_path).parent.parent == tmp_path / "cache" / "workspaces"
    assert workspace_db(None) == tmp_path / "cache" / "warpforge.db"
    with Store.for_workspace(None) as store:
        assert store.path == tmp_path / "cache" / "warpforge.db" and store.path.is_file()


def test_the_retrieval_index_opens_its_file_like_the_store(tmp_path: Path) -> None:
    path = tmp_path / "rag" / "index.sqlite"
    backend = SqliteBackend(path)
    chunk = Chunk("c1", "cub", "block_reduce.cuh", "blockReduceSum", "function", "reduce", ("warp_shuffle",), 1.0,
                  1, 9, "__device__ float blockReduceSum(float v) { return v; }")
    assert backend.add([chunk]) == 1
    backend.close()
    again = SqliteBackend(path)  # reopening keeps the chunks and re-creates nothing
    assert again.count() == 1 and again.sources() == {"cub": 1}
    again.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


WRITER = """
import os, sys, time
from pathlib import Path
from warpforge.search.memory import SearchMemory
from warpforge.store import EvalKey, Store
path, go, who, n = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
while not go.exists():
    time.sleep(0.005)
store = Store(path)  # both processes open (and migrate) the fresh file at the same moment
memory = SearchMemory(store)
for i in range(n):
    store.put_evaluation(EvalKey(f"{who}-{i}", "spec", "gpu", "drv"), "k", "ok", 1.0 + i / n, {"i": i, "who": who})
    memory.record("shared-kernel", "vectorize", True, 1.5)
print(store.count_evaluations())
"""


def test_two_processes_write_evaluations_at_once(tmp_path: Path) -> None:
    path, go, n = workspace_db(tmp_path), tmp_path / "go", 150
    env = {**os.environ, "PYTHONPATH": str(SERVER)}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(go), who, str(n)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for who in ("cli", "lsp")]
    time.sleep(0.5)  # let both interpreters start and wait on the same signal
    go.touch()
    results = [p.communicate(timeout=240) for p in procs]
    for p, (_, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
    with Store(path) as store:
        assert store.version == SCHEMA_VERSION
        assert store.count_evaluations() == 2 * n
        assert store.get_evaluation(EvalKey(f"lsp-{n - 1}", "spec", "gpu", "drv")) == {"i": n - 1, "who": "lsp"}
        assert SearchMemory(store).summary("shared-kernel") == {"vectorize": (2 * n, 2 * n, 1.5)}


# --------------------------------------------------------------------------- state out of the repository
def _git_status(folder: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=folder,
                          capture_output=True, text=True, check=True).stdout


def test_a_workspace_store_lives_in_the_user_cache_and_nothing_lands_in_the_workspace(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / "k.cu").write_text("__global__ void k() {}\n", encoding="utf-8")
    before = _git_status(repo)
    with Store.for_workspace(repo) as store:
        store.put_evaluation(KEY, "k", "ok", 1.2, {"speedup": 1.2})
        SearchMemory(store).record("k", "vectorize", True, 1.2)
        assert store.path.is_relative_to(tmp_path / "user-cache" / "workspaces")
    assert _git_status(repo) == before and not (repo / ".warpforge").exists()
    assert sorted(p.name for p in repo.iterdir() if p.name != ".git") == ["k.cu"]


def test_the_store_is_keyed_by_the_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "proj", tmp_path / "other" / "proj"
    a.mkdir()
    b.mkdir(parents=True)
    assert workspace_db(a) != workspace_db(b)  # same folder name, different workspaces
    assert workspace_db(a).parent.name.startswith("proj-")
    monkeypatch.chdir(tmp_path)
    assert workspace_db("proj") == workspace_db(a) == workspace_db(str(a) + "/")  # one workspace, any spelling
    (tmp_path / "link").symlink_to(a)
    assert workspace_db(tmp_path / "link") == workspace_db(a)
    with Store.for_workspace(a) as store:
        store.put_evaluation(KEY, "saxpy", "ok", 1.25, {"speedup": 1.25})
    with Store.for_workspace(b) as other:  # another workspace replays nothing of the first one's
        assert other.get_evaluation(KEY) is None
    with Store.for_workspace(a) as again:
        assert again.get_evaluation(KEY) == {"speedup": 1.25}


def test_an_override_names_the_file_or_a_folder_for_it(tmp_path: Path) -> None:
    assert workspace_db(tmp_path / "ws", tmp_path / "mine.db") == tmp_path / "mine.db"
    folder = tmp_path / "folder"
    folder.mkdir()
    assert workspace_db(tmp_path / "ws", folder) == folder / "warpforge.db"
    assert workspace_db(None, f"{tmp_path}/new/") == tmp_path / "new" / "warpforge.db"
    assert workspace_db(tmp_path / "ws", "") == workspace_db(tmp_path / "ws")  # an empty setting: the default
    with Store.for_workspace(tmp_path / "ws", tmp_path / "mine.db") as store:
        assert store.path == tmp_path / "mine.db" and store.path.is_file()


def test_a_warpforge_folder_is_created_with_a_gitignore_of_everything(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    with Store.for_workspace(repo, repo / ".warpforge" / "warpforge.db") as store:
        store.put_evaluation(KEY, "k", "ok", 1.2, {"speedup": 1.2})
        ignore = repo / ".warpforge" / ".gitignore"
        assert ignore.read_text(encoding="utf-8").splitlines()[-1] == "*"
        assert _git_status(repo) == ""  # the database, its WAL files and the .gitignore itself: all ignored
    # a folder below one: the .warpforge folder above it gets the .gitignore
    with Store(repo / ".warpforge" / "deep" / "x.db"):
        assert _git_status(repo) == ""
    # an existing .gitignore is the user's: left as it is
    ignore.write_text("*.db\n", encoding="utf-8")
    Store(repo / ".warpforge" / "warpforge.db").close()
    assert ignore.read_text(encoding="utf-8") == "*.db\n"
