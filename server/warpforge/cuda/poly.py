"""Integer polynomials over index names: ``{("i",): 4, ("j", "n"): 1, (): 3}`` is ``4*i + j*n + 3``.

Why a module of its own: the source analyzers (``profile/analyzers/_facts.py``: which thread touches which
element) and the kernel IR (``policy/ir/affine.py``: accesses as affine functions) both read an index
expression into this form, and both need the same arithmetic on it.
"""

from __future__ import annotations

#: monomial (sorted names, with repeats for powers) -> integer coefficient; zero terms are dropped
Poly = dict[tuple[str, ...], int]


def padd(a: Poly, b: Poly, sign: int = 1) -> Poly:
    """``a + sign * b``."""
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, 0) + sign * c
        if out[m] == 0:
            del out[m]
    return out


def pmul(a: Poly, b: Poly) -> Poly:
    """``a * b``."""
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(sorted((*ma, *mb)))
            out[m] = out.get(m, 0) + ca * cb
            if out[m] == 0:
                del out[m]
    return out
