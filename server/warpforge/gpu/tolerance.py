"""How a tolerance reads and what absolute floor it gives, without numpy.

Why a module of its own: ``warpforge spec`` prints every output's tolerance and must not import numpy (start-up
pays only for what it uses: tests/test_lazy_imports.py); the comparison (``gpu.compare``, numpy) and the
worker use the same two functions.
"""

from __future__ import annotations

import math


def tolerance_text(rtol: float, atol: float, norm: float = 0.0, scale: float | None = None) -> str:
    """A tolerance for people: ``exact``, ``rtol=1e-4 atol=1e-5``, and the ``norm`` part where it is set (with
    the output's largest magnitude, where one was measured)."""
    if rtol == 0 and atol == 0 and norm == 0:
        return "exact"
    text = f"rtol={rtol:g} atol={atol:g}"
    if norm:
        text += f" norm={norm:g}" + (f" x max|want| {scale:.3g}" if scale is not None else "")
    return text


def normwise_atol(atol: float, norm: float, scale: float) -> float:
    """The absolute floor an output is compared with: ``atol`` plus ``norm`` times its largest magnitude in
    the original's run (``scale``; see ``spec.model.DEFAULT_NORMS`` for why). A scale that is not finite (an
    output holding only NaN or inf) adds nothing."""
    if norm <= 0 or not math.isfinite(scale) or scale <= 0:
        return atol
    return atol + norm * scale
