"""The analyzer registry: one module per analyzer, each registering a function of a KernelContext.

Adding a hint is adding a module here (the way Nsight Compute rule files are added): every module in
this package is imported by ``load`` and registers its analyzers and defines its finding codes.
``needs`` says what evidence an analyzer requires ("source", "ptxas", "sass", "spec"), so the
driver skips it cleanly when that evidence is missing (no nvcc, a kernel that does not compile, no spec).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..context import KernelContext
from ..findings import Finding

AnalyzerFn = Callable[[KernelContext], Iterable[Finding]]


@dataclass(frozen=True)
class Analyzer:
    name: str
    codes: tuple[str, ...]
    needs: frozenset[str]
    fn: AnalyzerFn


REGISTRY: dict[str, Analyzer] = {}



def analyzer(
    name: str, codes: tuple[str, ...], needs: Iterable[str] = ("source",)
) -> Callable[[AnalyzerFn], AnalyzerFn]:
    """Register an analyzer function under ``name``."""

    def deco(fn: AnalyzerFn) -> AnalyzerFn:
        if name in REGISTRY:
            raise ValueError(f"analyzer {name} registered twice")
        REGISTRY[name] = Analyzer(name, codes, frozenset(needs), fn)
        return fn

    return deco


_loaded = False


def load() -> dict[str, Analyzer]:
    """Import every analyzer module once and return the registry."""
    global _loaded
    if not _loaded:
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
            if not info.name.startswith("_"):
                importlib.import_module(f"{__name__}.{info.name}")
        _loaded = True
    return REGISTRY
