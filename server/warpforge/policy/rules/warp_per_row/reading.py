"""Text-level readings warp_per_row's analysis and rewrite share: canonical text, identifiers, whether an
index is one lane's element, which thread coordinates the re-mapping changes, atomics, reductions.

Why a module of its own: they are pure functions of (node, bytes) used by the recognizer and by the code
generator alike (and by ``column_split``, ``stride_reduce``, ``atomic_aggregate``), so they must not depend on
either.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tree_sitter import Node

from ....cuda.tree import node_text, walk
from .._structural import (
    MINMAX_FUNCS,
    Bound,
    is_ident,
    render,
    statements,
    subscript_parts,
    unparen,
)
from .shape import _COORDS, _Reject, _Shape


def _canon_text(text: str) -> str:
    """Statement or expression text without whitespace and without parentheses around single names."""
    t = re.sub(r"\s+", "", text)
    prev = None
    while prev != t:
        prev, t = t, re.sub(r"\(([A-Za-z_0-9.]+)\)", r"\1", t)
    return t


def _ids(node: Node, data: bytes) -> set[str]:
    return {node_text(n, data) for n in walk(node) if n.type == "identifier"}


def _renamed_canon(node: Node, data: bytes, var: str) -> str:
    """Canonical text of an index with the loop variable replaced by ``@`` (equal across loops)."""
    return _canon_text(render(node, data, lambda n: "@" if n.type == "identifier" and node_text(n, data) == var
                              else None))


def _unconditional(n: Node, loop: Node, data: bytes) -> bool:
    """Is ``n`` evaluated on every iteration of ``loop`` (not in a branch of an ``if``, ``?:``, ``&&``/``||``)?"""
    child, p = n, n.parent
    while p is not None and p.id != loop.id:
        if p.type == "if_statement" and child != p.child_by_field_name("condition"):
            return False
        if p.type == "conditional_expression" and child != p.child_by_field_name("condition"):
            return False
        if p.type == "binary_expression" and child == p.child_by_field_name("right"):
            op = p.child_by_field_name("operator")
            if op is not None and node_text(op, data) in ("&&", "||"):
                return False
        if p.type in ("for_statement", "while_statement", "do_statement", "switch_statement"):
            return False
        child, p = p, p.parent
    return p is not None


#: atomics whose result a statement may discard; the target is then only ever updated atomically
ATOMICS = frozenset({"atomicAdd", "atomicSub", "atomicMax", "atomicMin", "atomicAnd", "atomicOr", "atomicXor"})


def atomic_target(e: Node, data: bytes) -> tuple[str, Node | None, Node] | None:
    """(pointer name, index or None, value) of ``atomicOp(&p[i], v)``, ``atomicOp(p + i, v)``, ``atomicOp(p, v)``."""
    if e.type != "call_expression":
        return None
    fn, args = e.child_by_field_name("function"), e.child_by_field_name("arguments")
    if fn is None or args is None or node_text(fn, data) not in ATOMICS:
        return None
    xs = [a for a in args.named_children if a.type != "comment"]
    if len(xs) != 2:
        return None
    t = unparen(xs[0])
    if t.type == "pointer_expression" and node_text(t, data).lstrip().startswith("&"):
        arg = t.child_by_field_name("argument")
        parts = subscript_parts(unparen(arg), data) if arg is not None else None
        if parts is None or unparen(parts[0]).type != "identifier":
            return None
        return node_text(unparen(parts[0]), data), parts[1], xs[1]
    if t.type == "identifier":
        return node_text(t, data), None, xs[1]
    if t.type == "binary_expression":
        op, a, b = (t.child_by_field_name(f) for f in ("operator", "left", "right"))
        if op is not None and a is not None and b is not None and node_text(op, data) == "+" \
                and unparen(a).type == "identifier":
            return node_text(unparen(a), data), b, xs[1]
    return None


def _varying(node: Node, data: bytes) -> bool:
    """Does code use a thread coordinate the re-mapping changes (threadIdx, blockDim, blockIdx.x, gridDim.x)?

    ``blockIdx.y``/``.z`` and ``gridDim.y``/``.z`` (a batch index on the grid's y axis) are the same in
    the original and the rewrite, whose launch keeps the grid's y and z."""
    for n in walk(node):
        if n.type == "identifier" and node_text(n, data) in _COORDS:
            p = n.parent
            if p is None or p.type != "field_expression" or not _yz(p, data):
                return True
    return False


def _yz(n: Node, data: bytes) -> bool:
    """``blockIdx.y``, ``blockIdx.z``, ``gridDim.y`` or ``gridDim.z``."""
    arg, fld = n.child_by_field_name("argument"), n.child_by_field_name("field")
    return (n.type == "field_expression" and arg is not None and fld is not None
            and node_text(arg, data) in ("blockIdx", "gridDim") and node_text(fld, data) in ("y", "z"))


def _split_guard(cond: Node, data: bytes, row: str, op: str,
                 bound_of: Callable[[Node, bytes, str], Bound | None]) -> tuple[Bound | None, list[Node]]:
    """Split a guard into its bound on ``row`` and the other terms of its ``op`` chain (``||`` for an exit,
    ``&&`` for a guarded body). The other terms must not mention ``row``: they are the same for every lane
    of a row (the guard as a whole is uniform per warp either way)."""
    terms: list[Node] = []
    stack = [unparen(cond)]
    while stack:
        n = stack.pop()
        o = n.child_by_field_name("operator") if n.type == "binary_expression" else None
        if o is not None and node_text(o, data) == op:
            left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
            if left is None or right is None:
                raise _Reject(f"the guard's `{op}` has a side this rule cannot read", n)
            stack.extend((unparen(right), unparen(left)))
        else:
            terms.append(n)
    bound: Bound | None = None
    others: list[Node] = []
    for t in terms:
        b = bound_of(t, data, row) if bound is None else None
        if b is not None:
            bound = b
        else:
            others.append(t)
    return bound, others


def strided_in_loop(shape: _Shape, data: bytes) -> bool:
    """Some loop read is ``E(j) + col`` (strided in j, contiguous across threads) — also ``v[E(j)]`` through a
    view ``v = p + col`` declared before the loop (``const float* x = dout + o; ... x[i * OC]``); none is
    contiguous in j."""
    col = shape.row.name
    at_col = _column_views(shape, data, col)
    seen = False
    for lp in shape.loops:
        for n in walk(lp.node, ("subscript_expression",)):
            parts = subscript_parts(n, data)
            if parts is None:
                return False
            idx = parts[1]
            if _lane_index(idx, data, lp.var):
                return False
            if lp.var in _ids(idx, data) and (_lane_index(idx, data, col) or (
                    node_text(unparen(parts[0]), data) in at_col and col not in _ids(idx, data))):
                seen = True
    return seen


def _column_views(shape: _Shape, data: bytes, col: str) -> set[str]:
    """Pointers declared at the top level as ``p + col`` (or ``p + (E + col)``, E free of ``col``): a read
    ``v[e]`` of one is ``p[e + col]``."""
    out: set[str] = set()
    for st in shape.prefix + shape.between + shape.rest:
        if st.type != "declaration" or len(st.children_by_field_name("declarator")) != 1:
            continue
        d = st.children_by_field_name("declarator")[0]
        name, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
        if d.type != "init_declarator" or name is None or value is None or name.type != "pointer_declarator":
            continue
        inner = name.child_by_field_name("declarator")
        v = unparen(value)
        left, op, right = (v.child_by_field_name(f) for f in ("left", "operator", "right"))
        if inner is None or inner.type != "identifier" or v.type != "binary_expression" or left is None \
                or op is None or right is None or node_text(op, data) != "+":
            continue
        if col not in _ids(left, data) and _lane_index(right, data, col):
            out.add(node_text(inner, data))
    return out


def _lane_index(idx: Node, data: bytes, j: str) -> bool:
    """``j``, ``E + j`` or ``j + E`` with E free of j: distinct j give distinct elements."""
    n = unparen(idx)
    if is_ident(n, data, j):
        return True
    if n.type != "binary_expression":
        return False
    op = n.child_by_field_name("operator")
    left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
    if op is None or node_text(op, data) != "+" or left is None or right is None:
        return False
    if is_ident(right, data, j):
        return j not in _ids(left, data)
    if is_ident(left, data, j):
        return j not in _ids(right, data)
    return False


def _reduction(op: str, right: Node, acc: str, data: bytes) -> tuple[str | None, Node | None]:
    """(kind, the other operand) of ``acc op= e`` / ``acc = acc + e`` / ``acc = f(acc, e)``."""
    if op in ("+=", "-="):
        return "sum" + op[0], right
    if op != "=":
        return None, None
    r = unparen(right)
    if r.type == "binary_expression":
        bop = r.child_by_field_name("operator")
        a, b = r.child_by_field_name("left"), r.child_by_field_name("right")
        if bop is not None and a is not None and b is not None:
            if node_text(bop, data) == "+" and is_ident(a, data, acc):
                return "sum+", b
            if node_text(bop, data) == "+" and is_ident(b, data, acc):
                return "sum+", a
            if node_text(bop, data) == "-" and is_ident(a, data, acc):
                return "sum-", b
    if r.type == "call_expression":
        fn = r.child_by_field_name("function")
        args = r.child_by_field_name("arguments")
        if fn is not None and args is not None and node_text(fn, data) in MINMAX_FUNCS:
            xs = [c for c in args.named_children if c.type != "comment"]
            if len(xs) == 2:
                if is_ident(xs[0], data, acc):
                    return node_text(fn, data), xs[1]
                if is_ident(xs[1], data, acc):
                    return node_text(fn, data), xs[0]
    return None, None


def _kind(kind: str) -> str:
    """Reductions of one accumulator may mix ``+=`` and ``-=``: both are sums."""
    return "sum" if kind.startswith("sum") else kind


def _rename_ids(node: Node, data: bytes, mapping: dict[str, str]) -> str:
    def rep(n: Node) -> str | None:
        if n.type == "identifier":
            return mapping.get(node_text(n, data))
        return None

    return render(node, data, rep)


def _rename_body(node: Node, data: bytes, mapping: dict[str, str], flags: dict[int, str],
                 subs: dict[int, str] | None = None) -> str:
    """The loop body with accumulators renamed to the lane's partials; an arg-reduction's update also
    raises the lane's flag (a pair found in the data beats the start value on ties); subscripts in ``subs``
    are replaced whole (a row cache's reads)."""
    def rep(n: Node) -> str | None:
        if subs and n.id in subs:
            return subs[n.id]
        if n.type == "identifier":
            return mapping.get(node_text(n, data))
        if n.parent is not None and n.parent.id in flags and n == n.parent.child_by_field_name("consequence"):
            inner = "\n".join(_rename_body(c, data, mapping, flags, subs) for c in statements(n))
            return f"{{\n{inner}\n{flags[n.parent.id]} = 1;\n}}"
        return None

    return render(node, data, rep)
