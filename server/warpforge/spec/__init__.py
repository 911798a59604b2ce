"""Benchmark specs: how to run a kernel (sizes, argument roles and data, launch, tolerances, tunables)."""

from .model import (
    ArgSpec,
    Distribution,
    KernelSpec,
    LaunchSpec,
    ResolvedArg,
    ResolvedSpec,
    Role,
    SizeSpec,
    SpecError,
    Tunable,
)
from .resolve import build_spec, guess_spec, load_spec

__all__ = [
    "ArgSpec",
    "Distribution",
    "KernelSpec",
    "LaunchSpec",
    "ResolvedArg",
    "ResolvedSpec",
    "Role",
    "SizeSpec",
    "SpecError",
    "Tunable",
    "build_spec",
    "guess_spec",
    "load_spec",
]
