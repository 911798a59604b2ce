"""The defaults an optimize job starts from, in one place for the CLI, the language server and the search.

The same job can be started from a terminal (``warpforge optimize``), from the editor (the extension's
settings, sent to the server) or from code (``search.engine.Budget``); each used to write its own numbers
and they had drifted (a budget of 48 candidates in three places, 64 in the search). The extension declares
its settings' defaults in ``package.json`` for VS Code to show; ``tests/test_defaults.py`` holds those to
the values here.
"""

from __future__ import annotations

#: search strategies an optimize job can run, and the one it runs unless told otherwise
STRATEGIES: tuple[str, ...] = ("beam", "mcts")
STRATEGY = "beam"

#: maximum candidates one optimize job evaluates (each costs a build and a measured run on the GPU)
BUDGET = 48

#: wall-clock seconds one optimize job may take
TIME_BUDGET = 300.0

#: where candidates are evaluated: "local" (the GPUs of this machine), "ray" or a "python:MODULE:FUNCTION" factory
EVALUATION_BACKEND = "local"
