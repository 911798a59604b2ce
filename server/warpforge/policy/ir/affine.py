"""Index expressions as affine functions of thread/block coordinates and loop counters.

Why: "which thread touches which element" is the question behind every structural rewrite. Answering it
from syntax, each rule its own way, is what made the rules recognizers of one spelling. Here an index is
evaluated once into a polynomial over *atoms*, following locals to their single definition:

* index atoms vary between threads or iterations: ``threadIdx.x``..., ``blockIdx.x``..., loop counters;
* uniform atoms are the same for every thread and iteration: scalar parameters, ``blockDim``/``gridDim``,
  locals of those;

and it is affine when no monomial multiplies two index atoms. The result maps each index atom to its
coefficient (text over uniform atoms, ``"T*C"``) and ``"1"`` to the constant term. Anything else
(a division or modulo of an index atom, a value read from memory, a local written in a loop) is
non-affine, with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.poly import Poly as Poly  # re-exported: the passes import it from here
from ...cuda.poly import padd, pmul, render
from ...cuda.tree import node_text, unparen

COORDS = ("threadIdx", "blockIdx")
UNIFORM_COORDS = ("blockDim", "gridDim")



class NonAffine(Exception):
    """Why an expression is not an affine function of the index atoms."""


@dataclass
class Scope:
    """What names mean: single-assignment locals (their value), loop counters, uniform names."""

    values: Mapping[str, Node]
    counters: frozenset[str]
    uniform: frozenset[str]
    #: locals that are written more than once (their value depends on the path)
    varying: frozenset[str]
    data: bytes
    depth: int = 0


def _const(p: Poly) -> int | None:
    if not p:
        return 0
    if set(p) == {()}:
        return p[()]
    return None


def poly(node: Node, scope: Scope) -> Poly:
    """The polynomial of an integer expression; raises ``NonAffine`` with the reason."""
    n = unparen(node)
    t = n.type
    text = node_text(n, scope.data)
    if t == "number_literal":
        try:
            return {(): int(text.rstrip("uUlL"), 0)}
        except ValueError:
            raise NonAffine(f"`{text}` is not an integer") from None
    if t == "cast_expression":
        v = n.child_by_field_name("value")
        if v is None:
            raise NonAffine(f"`{text}`")
        return poly(v, scope)
    if t == "field_expression":
        arg, fld = n.child_by_field_name("argument"), n.child_by_field_name("field")
        obj = node_text(arg, scope.data) if arg is not None else ""
        if obj in COORDS + UNIFORM_COORDS and fld is not None:
            return {(f"{obj}.{node_text(fld, scope.data)}",): 1}
        raise NonAffine(f"`{text}` is read from memory")
    if t == "identifier":
        if text in scope.counters or text in scope.uniform:
            return {(text,): 1}
        if text in scope.varying:
            raise NonAffine(f"`{text}` is written after its declaration")
        v = scope.values.get(text)
        if v is None:
            raise NonAffine(f"`{text}` is not a parameter, loop counter or single-assignment local")
        if scope.depth > 32:
            raise NonAffine("locals nested too deep")
        return poly(v, Scope(scope.values, scope.counters, scope.uniform, scope.varying, scope.data,
                             scope.depth + 1))
    if t == "unary_expression":
        un_op = n.child_by_field_name("operator")
        arg = n.child_by_field_name("argument")
        if un_op is not None and arg is not None and node_text(un_op, scope.data) in ("-", "+"):
            p = poly(arg, scope)
            return {m: -c for m, c in p.items()} if node_text(un_op, scope.data) == "-" else p
    if t == "binary_expression":
        op_n, a_n, b_n = (n.child_by_field_name(f) for f in ("operator", "left", "right"))
        if op_n is not None and a_n is not None and b_n is not None:
            op = node_text(op_n, scope.data)
            if op in ("+", "-"):
                return padd(poly(a_n, scope), poly(b_n, scope), 1 if op == "+" else -1)
            if op == "*":
                return pmul(poly(a_n, scope), poly(b_n, scope))
            if op == "<<":
                k = _const(poly(b_n, scope))
                if k is not None and 0 <= k < 63:
                    return pmul(poly(a_n, scope), {(): 1 << k})
            a, b = poly(a_n, scope), poly(b_n, scope)
            if op in ("/", "%", ">>", "&") and not _indexed(a, scope) and not _indexed(b, scope):
                return {(f"({node_text(n, scope.data)})",): 1}  # a uniform value the polynomial keeps whole
            raise NonAffine(f"`{text}`: `{op}` of a thread or loop index")
    if t == "subscript_expression":
        raise NonAffine(f"`{text}`: an index read from memory (a gather)")
    if t == "call_expression":
        raise NonAffine(f"`{text}`: a call")
    if t == "conditional_expression":
        raise NonAffine(f"`{text}`: a conditional")
    raise NonAffine(f"`{text}`")


def _indexed(p: Poly, scope: Scope) -> bool:
    return any(is_index_atom(a, scope) for m in p for a in m)


def is_index_atom(atom: str, scope: Scope) -> bool:
    return atom.split(".")[0] in COORDS or atom in scope.counters


def affine(p: Poly, scope: Scope) -> dict[str, str]:
    """``p`` as index atom -> coefficient text (``"1"``: the constant term); raises ``NonAffine``."""
    groups: dict[str, list[tuple[tuple[str, ...], int]]] = {}
    for m, c in p.items():
        idx = [a for a in m if is_index_atom(a, scope)]
        if len(idx) > 1:
            raise NonAffine(f"a product of two indices ({' * '.join(idx)})")
        key = idx[0] if idx else "1"
        rest = list(m)
        if idx:
            rest.remove(idx[0])
        groups.setdefault(key, []).append((tuple(rest), c))
    return {k: render(v, times="*", constant_last=False) for k, v in sorted(groups.items())}
