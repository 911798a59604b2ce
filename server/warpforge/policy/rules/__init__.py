"""WarpForge's transformation library: one module per transformation family, auto-registered.

A rule proposes parameterized variants of the *current* candidate (``variants``) and applies one
(``apply``). Rules are deterministic functions of (candidate, parameter), so a variant is identified by
its steps ``family:param`` and can be replayed — which is how crossover composes two branches. A rule
that cannot apply safely returns no variants: verification would reject garbage, but proposing it wastes
the budget.
"""

from __future__ import annotations

import importlib
import pkgutil

from .base import Rule, RuleContext

REGISTRY: dict[str, Rule] = {}


def register(rule: Rule) -> Rule:
    if rule.family in REGISTRY:
        raise ValueError(f"transformation family {rule.family} registered twice")
    REGISTRY[rule.family] = rule
    return rule


_loaded = False


def load() -> dict[str, Rule]:
    """Import every rule module once; returns family -> rule."""
    global _loaded
    if not _loaded:
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
            if not info.name.startswith("_") and info.name != "base":
                importlib.import_module(f"{__name__}.{info.name}")
        _loaded = True
    return REGISTRY


__all__ = ["REGISTRY", "Rule", "RuleContext", "load", "register"]
