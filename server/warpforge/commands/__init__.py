"""Subcommands beyond the foundation's, one module each, registered with the CLI.

Each module exposes ``register(subparsers)``; adding a command is adding a module to ``MODULES``.
A call loads only the module of the command it runs (``register_all(sub, only=...)``): the modules import
the search, the GPU machinery and numpy, which ``warpforge hints`` or ``--version`` never use.
"""

from __future__ import annotations

import importlib
from typing import Any

MODULES: tuple[str, ...] = ("hints", "profile", "optimize", "bench", "verify", "serve", "index", "selftest")


def register_all(sub: Any, only: str | None = None) -> None:
    """Register every command, or only ``only`` when it names one (``""``: none; anything else, e.g. a typo:
    all, so that argparse can list them)."""
    if only == "":
        return
    for name in (only,) if only in MODULES else MODULES:
        importlib.import_module(f"{__name__}.{name}").register(sub)
