"""Integer polynomials over index names: ``{("i",): 4, ("j", "n"): 1, (): 3}`` is ``4*i + j*n + 3``.

Why a module of its own: the source analyzers (``profile/analyzers/_facts.py``: which thread touches which
element) and the kernel IR (``policy/ir/affine.py``: accesses as affine functions) both read an index
expression into this form, and both need the same arithmetic on it.
"""

from __future__ import annotations

from collections.abc import Iterable

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


def render(terms: Iterable[tuple[tuple[str, ...], int]], times: str = " * ", constant_last: bool = True) -> str:
    """Terms ``(monomial, coefficient)`` as C text, unit coefficients dropped, ``+ -`` written ``-``: the IR's
    rewrites write ``4 * i + j * n + 3`` (constant last), its affine summaries ``3 + 4*i`` (``times="*"``,
    sorted as they come)."""
    parts: list[str] = []
    order = sorted(terms, key=lambda mc: (len(mc[0]) == 0, mc[0])) if constant_last else sorted(terms)
    for m, c in order:
        body = times.join(m)
        if not body:
            parts.append(str(c))
        elif c == 1:
            parts.append(body)
        elif c == -1:
            parts.append(f"-{body}")
        else:
            parts.append(f"{c}{times}{body}")
    return " + ".join(parts).replace("+ -", "- ") or "0"
