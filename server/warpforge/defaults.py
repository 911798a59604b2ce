"""The defaults an optimize job starts from, in one place for the CLI, the language server and the search,
and the per-user folder every cache of this machine lives under.

The same job can be started from a terminal (``warpforge optimize``), from the editor (the extension's
settings, sent to the server) or from code (``search.engine.Budget``); each used to write its own numbers
and they had drifted (a budget of 48 candidates in three places, 64 in the search). The extension declares
its settings' defaults in ``package.json`` for VS Code to show; ``tests/test_defaults.py`` holds those to
the values here.
"""

from __future__ import annotations

import os
from pathlib import Path

#: search strategies an optimize job can run, and the one it runs unless told otherwise
STRATEGIES: tuple[str, ...] = ("beam", "mcts")
STRATEGY = "beam"

#: maximum candidates one optimize job evaluates (each costs a build and a measured run on the GPU)
BUDGET = 48

#: wall-clock seconds one optimize job may take
TIME_BUDGET = 300.0

#: where candidates are evaluated: "local" (the GPUs of this machine), "ray" or a "python:MODULE:FUNCTION" factory
EVALUATION_BACKEND = "local"


def user_cache_dir() -> Path:
    """WarpForge's per-user folder: ``$WARPFORGE_CACHE``, else ``$XDG_CACHE_HOME/warpforge``, else
    ``~/.cache/warpforge``. The build cache, the input files, the hints, the roofline ceilings, the retrieval
    index and the store of work outside a workspace all live under it, so one variable moves them all; it
    is read at every call, as a process (or a test) may set the variables after importing this module."""
    base = os.environ.get("WARPFORGE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "warpforge")
    return Path(base)


def rag_index_path() -> Path:
    """The retrieval index: ``$WARPFORGE_RAG_INDEX``, else ``rag/index.sqlite`` in ``user_cache_dir()``."""
    if env := os.environ.get("WARPFORGE_RAG_INDEX"):
        return Path(env)
    return user_cache_dir() / "rag" / "index.sqlite"
