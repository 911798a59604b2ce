"""Choosing and opening an index backend: where the default index lives, which backend a name means.

Kept out of ``index.py`` because the backends import the records defined there (``Chunk``, ``Hit``,
``Query``); the chooser importing the backends from the same module made a cycle (docs/architecture.md).
"""

from __future__ import annotations

from pathlib import Path

from ..defaults import rag_index_path
from .index import Index


def default_index_path() -> Path:
    """``$WARPFORGE_RAG_INDEX``, else ``rag/index.sqlite`` in the per-user folder (``defaults.rag_index_path``)."""
    return rag_index_path()


def open_index(backend: str = "sqlite", *, path: str | Path | None = None, pinecone_host: str | None = None,
               pinecone_api_key: str | None = None, namespace: str | None = None, create: bool = True) -> Index:
    """The index on the chosen backend (``sqlite`` default; ``pinecone`` needs a key and an index host).

    ``create=False`` (reading: stats, search) never makes a file: a missing SQLite index is a ``ValueError``
    saying how to build one, rather than an empty index quietly created at a mistyped path. An explicit
    ``path`` must be in an existing folder either way; only the default one under the cache is made."""
    if backend == "sqlite":
        from .sqlite_fts import SqliteBackend

        where = Path(path) if path else default_index_path()
        build = f"build one with `warpforge index add DIR --source NAME{f' --index {path}' if path else ''}`"
        if path and not where.parent.is_dir():
            raise ValueError(f"{path}: the folder {where.parent} does not exist; create it"
                             + ("" if create else f", then {build}"))
        if not create and not where.is_file():
            raise ValueError(f"{where}: no index there; {build}")
        return Index(SqliteBackend(where))
    if backend == "pinecone":
        from .pinecone_backend import PineconeBackend

        return Index(PineconeBackend.from_env(host=pinecone_host, api_key=pinecone_api_key, namespace=namespace))
    raise ValueError(f"unknown index backend `{backend}`: use sqlite or pinecone")
