"""Thread-mapping shapes: the global thread index, grid-stride loops, a flattened 2-D index, the 2-D
one-thread-per-output kernel and the 1-D elementwise kernel.

Why a module of its own: which element a thread owns is what every structural rule re-maps, and these
recognizers say it once (the kernel IR in ``policy.ir`` reads more spellings; rules move to it one by one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tree_sitter import Node

from ....cuda.tree import node_text
from ....cuda.tree import unparen as unparen  # re-exported: the rules import it from here
from ....cuda.tree import written_names as written_names  # likewise
from .loops import Bound, Decl, failing_bound, single_decl, upper_bound
from .syntax import binary_parts, condition_of, is_builtin, is_ident, is_return_only, statements


def global_index(node: Node | None, data: bytes, axis: str = "x") -> str | None:
    """The multiplier ``M`` when ``node`` is ``blockIdx.<axis> * M + threadIdx.<axis>`` (either order of
    either operation), ``M`` being ``blockDim.<axis>`` or a constant name/literal; None otherwise."""
    if node is None:
        return None
    b = binary_parts(node, data)
    if b is None or b[1] != "+":
        return None
    for prod, tid in ((b[0], b[2]), (b[2], b[0])):
        if not is_builtin(tid, data, "threadIdx", axis):
            continue
        p = binary_parts(prod, data)
        if p is None or p[1] != "*":
            continue
        for bid, mult in ((p[0], p[2]), (p[2], p[0])):
            if not is_builtin(bid, data, "blockIdx", axis):
                continue
            m = unparen(mult)
            if is_builtin(m, data, "blockDim", axis) or m.type in ("identifier", "number_literal"):
                return node_text(m, data)
    return None


def is_grid_stride(node: Node | None, data: bytes, mult: str, axis: str = "x") -> bool:
    """``blockDim.x * gridDim.x`` (either order; ``M * gridDim.x`` when the index used the constant ``M``)."""
    if node is None:
        return False
    p = binary_parts(node, data)
    if p is None or p[1] != "*":
        return False
    for a, g in ((p[0], p[2]), (p[2], p[0])):
        if is_builtin(g, data, "gridDim", axis) and (node_text(unparen(a), data) == mult
                                                      or (_is_block_dim(mult, axis) and
                                                          is_builtin(a, data, "blockDim", axis))):
            return True
    return False


def _is_block_dim(mult: str, axis: str) -> bool:
    """Whether the index's multiplier text is ``blockDim.<axis>``, also behind a cast (``(size_t)blockDim.x``):
    a stride ``(size_t)gridDim.x * blockDim.x`` is the same number of threads however each side is cast."""
    t = re.sub(r"\(\s*[A-Za-z_][\w\s]*\)", "", mult).replace(" ", "")
    return t in (f"blockDim.{axis}", f"(blockDim.{axis})")


def _monomials(node: Node, data: bytes) -> list[tuple[str, ...]] | None:
    """``node`` as a sum of products of thread coordinates (casts looked through), or None when anything
    else (a name, a literal, a division) takes part."""
    n = unparen(node)
    while n.type == "cast_expression":
        inner = n.child_by_field_name("value")
        if inner is None:
            return None
        n = unparen(inner)
    if n.type == "field_expression":
        arg, fld = n.child_by_field_name("argument"), n.child_by_field_name("field")
        if arg is None or fld is None or node_text(arg, data) not in ("threadIdx", "blockIdx", "blockDim", "gridDim"):
            return None
        return [(f"{node_text(arg, data)}.{node_text(fld, data)}",)]
    b = binary_parts(n, data)
    if b is None or b[1] not in ("+", "*"):
        return None
    left, right = _monomials(b[0], data), _monomials(b[2], data)
    if left is None or right is None:
        return None
    if b[1] == "+":
        return left + right
    return [tuple(sorted(x + y)) for x in left for y in right]


#: ``(blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x`` expanded
_FLAT_2D = sorted([("threadIdx.x",), ("blockDim.x", "blockIdx.x"), ("blockDim.x", "blockIdx.y", "gridDim.x")])


def flat_index_2d(node: Node | None, data: bytes) -> bool:
    """Whether ``node`` is the global thread index of a 2-D grid of 1-D blocks flattened row-major
    (``blockIdx.y * gridDim.x * blockDim.x + blockIdx.x * blockDim.x + threadIdx.x`` in any arrangement):
    written to stay under the grid's x limit, it equals ``blockIdx.x * blockDim.x + threadIdx.x`` on a
    1-D grid, where ``blockIdx.y`` is 0."""
    if node is None:
        return False
    m = _monomials(node, data)
    return m is not None and sorted(tuple(sorted(x)) for x in m) == _FLAT_2D


# ----------------------------------------------------------------------------- 2D one-thread-per-output


@dataclass(frozen=True)
class Grid2D:
    """``X = blockIdx.x * blockDim.x + threadIdx.x; Y = ...y...; if (X < NX && Y < NY) { inner }``.

    ``exit_form``: written ``if (X >= NX || Y >= NY) return;`` followed by ``inner``. ``ok_cond`` is the
    condition under which a thread's output exists, as text (the guard, or the negated exit test).
    """

    x: Decl
    y: Decl
    x_bound: Bound
    y_bound: Bound
    guard: Node
    exit_form: bool
    ok_cond: str
    inner: list[Node]


def _split(node: Node, data: bytes, op: str) -> list[Node] | None:
    n = unparen(node)
    b = binary_parts(n, data)
    if b is not None and b[1] == op:
        left = _split(b[0], data, op)
        right = _split(b[2], data, op)
        if left is None or right is None:
            return None
        return left + right
    return [n]


def grid_2d(body: Node, data: bytes) -> Grid2D | None:
    """The 2D one-thread-per-output shape (both indices with blockDim multipliers), or None."""
    sts = statements(body)
    idx: dict[str, Decl] = {}
    at = 0
    while at < len(sts) and len(idx) < 2:
        d = single_decl(sts[at], data)
        if d is None or d.pointer or d.value is None:
            return None
        for axis in ("x", "y"):
            if global_index(d.value, data, axis) == f"blockDim.{axis}" and axis not in idx:
                idx[axis] = d
                break
        else:
            return None
        at += 1
    if len(idx) != 2 or at >= len(sts) or sts[at].type != "if_statement":
        return None
    g = sts[at]
    cond = condition_of(g)
    if cond is None or g.child_by_field_name("alternative") is not None:
        return None
    x, y = idx["x"], idx["y"]
    ands = _split(cond, data, "&&")
    if ands is not None and len(ands) == 2 and at == len(sts) - 1:
        for a, b in ((ands[0], ands[1]), (ands[1], ands[0])):
            bx, by = upper_bound(a, data, x.name), upper_bound(b, data, y.name)
            if bx is not None and by is not None:
                return Grid2D(x, y, bx, by, g, False, node_text(cond, data),
                              statements(g.child_by_field_name("consequence")))
    ors = _split(cond, data, "||")
    if ors is not None and len(ors) == 2 and is_return_only(g.child_by_field_name("consequence")):
        for a, b in ((ors[0], ors[1]), (ors[1], ors[0])):
            bx, by = failing_bound(a, data, x.name), failing_bound(b, data, y.name)
            if bx is not None and by is not None:
                return Grid2D(x, y, bx, by, g, True, f"!({node_text(cond, data)})", sts[at + 1 :])
    return None


# ----------------------------------------------------------------------------- 1D one-thread-per-element


@dataclass
class Elementwise:
    """A one-thread-per-element kernel (see ``elementwise_1d``)."""

    form: str  # "guard" | "exit" | "stride"
    index: Decl
    index_expr: Node
    mult: str
    prefix: list[Node]
    between: list[Node]
    cond: Node
    bound: Bound
    body: list[Node]
    stride: Node | None


def _index_decl_1d(stmt: Node, data: bytes) -> tuple[Decl, str] | None:
    d = single_decl(stmt, data)
    if d is None or d.pointer or d.shared or d.value is None:
        return None
    mult = global_index(d.value, data, "x")
    return (d, mult) if mult is not None else None


def elementwise_1d(body: Node, data: bytes) -> Elementwise | None:
    """One thread per element along x: ``T i = blockIdx.x * M + threadIdx.x;`` then ``if (i < LIMIT) { body }``
    (form "guard", the last statement), ``if (i >= LIMIT) return;`` + body (form "exit"), or a grid-stride loop
    ``for (T i = <that>; i < LIMIT; i += M * gridDim.x) body`` (form "stride", the last statement).

    ``prefix``: statements before the index; ``between``: between it and the guard (callers check them).
    """
    sts = statements(body)
    for at, st in enumerate(sts):
        if st.type == "for_statement":
            init = st.child_by_field_name("initializer")
            if init is None:
                return None
            got = _index_decl_1d(init, data)
            if got is None or at != len(sts) - 1:
                return None
            idx, mult = got
            cond = st.child_by_field_name("condition")
            upd = st.child_by_field_name("update")
            if cond is None or upd is None:
                return None
            bound = upper_bound(cond, data, idx.name)
            u = unparen(upd)
            if bound is None or u.type != "assignment_expression":
                return None
            op = u.child_by_field_name("operator")
            if op is None or node_text(op, data) != "+=" or not is_ident(u.child_by_field_name("left"), data, idx.name):
                return None
            stride = u.child_by_field_name("right")
            if not is_grid_stride(stride, data, mult):
                return None
            assert idx.value is not None
            return Elementwise("stride", idx, idx.value, mult, sts[:at], [], cond, bound,
                          statements(st.child_by_field_name("body")), stride)
        got = _index_decl_1d(st, data)
        if got is None:
            continue
        idx, mult = got
        assert idx.value is not None
        for j in range(at + 1, len(sts)):
            s = sts[j]
            if s.type != "if_statement":
                continue
            cond = condition_of(s)
            if cond is None or s.child_by_field_name("alternative") is not None:
                return None
            up = upper_bound(cond, data, idx.name)
            if up is not None and j == len(sts) - 1:
                return Elementwise("guard", idx, idx.value, mult, sts[:at], sts[at + 1 : j], cond, up,
                              statements(s.child_by_field_name("consequence")), None)
            down = failing_bound(cond, data, idx.name)
            if down is not None and is_return_only(s.child_by_field_name("consequence")):
                return Elementwise("exit", idx, idx.value, mult, sts[:at], sts[at + 1 : j], cond, down,
                              sts[j + 1 :], None)
            return None
        return None
    return None
