"""Operations on the index polynomials (``cuda.poly.Poly``) that the IR's rewriting passes share.

Why a module of its own: un-staging (``pass_unstage``) and output coordinates (``pass_coordinates``) both
substitute, rename, take coefficients of, evaluate and write back the same polynomials; the second imported
the first's private helpers until they moved here, beside nothing but themselves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ...cuda.poly import padd
from ...cuda.poly import render as render_terms
from ...spec.expr import ExprError
from ...spec.expr import parse as parse_expr
from .affine import NonAffine, Poly


def substitute(p: Poly, values: Mapping[str, int]) -> Poly:
    """``p`` with the atoms in ``values`` replaced by those numbers."""
    out: Poly = {}
    for m, c in p.items():
        rest = tuple(a for a in m if a not in values)
        for a in m:
            if a in values:
                c *= values[a]
        out = padd(out, {rest: c}) if c else out
    return out


def rename(p: Poly, old: str, new: str) -> Poly:
    """``p`` with the atom ``old`` named ``new``."""
    out: Poly = {}
    for m, c in p.items():
        out = padd(out, {tuple(sorted(new if a == old else a for a in m)): c})
    return out


def coefficient(p: Poly, atom: str) -> Poly:
    """The coefficient of ``atom`` in ``p``; raises ``NonAffine`` when ``p`` is not linear in it."""
    out: Poly = {}
    for m, c in p.items():
        n = m.count(atom)
        if n > 1:
            raise NonAffine(f"`{atom}` appears squared")
        if n == 1:
            rest = list(m)
            rest.remove(atom)
            out = padd(out, {tuple(rest): c})
    return out


def evaluate(p: Poly, env: Mapping[str, int]) -> int | None:
    """``p``'s value with ``env``'s numbers (a kept sub-expression ``(a * b)`` evaluated too); None where an
    atom has no value."""
    total = 0
    for m, c in p.items():
        v = c
        for a in m:
            if a in env:
                v *= env[a]
                continue
            if a.startswith("("):
                try:
                    got = parse_expr(a).evaluate(dict(env))
                except ExprError:
                    return None
                if isinstance(got, int):
                    v *= got
                    continue
            return None
        total += v
    return total


def render(p: Poly) -> str:
    """``p`` as C: constant term last, unit coefficients dropped."""
    return render_terms(p.items())


def names_read(p: Poly) -> set[str]:
    """The names a polynomial's rendering would read (its atoms, and the names inside a kept sub-expression)."""
    return {w for m in p for a in m for w in re.findall(r"[A-Za-z_]\w*", a)}
