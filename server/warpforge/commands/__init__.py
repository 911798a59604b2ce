"""Subcommands beyond the foundation's, one module each, registered with the CLI.

Each module exposes ``register(subparsers)``; adding a command is adding a module to ``MODULES``.
"""

from __future__ import annotations

import importlib
from typing import Any

MODULES: tuple[str, ...] = ("hints", "profile", "optimize", "bench", "verify", "serve", "index", "selftest")


def register_all(sub: Any) -> None:
    for name in MODULES:
        importlib.import_module(f"{__name__}.{name}").register(sub)
