"""smem_transpose: stage a transpose through a padded shared-memory tile so that both sides coalesce.

Why it helps: a naive transpose reads a row-major matrix along rows (consecutive threads, consecutive
addresses) but writes along columns of the output, so the 32 stores of a warp land in 32 different
128-byte lines — 32 transactions where one would do, and half the kernel's DRAM bandwidth wasted on
partial lines. Reading a 32×32 tile coalesced into shared memory, synchronizing, then writing it out with
the thread roles swapped makes the writes coalesced too. The tile's row is padded to 33 elements so that
reading a tile column hits 32 different banks (no 32-way bank conflict).

Recognized shape (names, types and expressions free)::

    T x = blockIdx.x * blockDim.x + threadIdx.x;      // the two index declarations, either order
    T y = blockIdx.y * blockDim.y + threadIdx.y;
    if (y < NY && x < NX) {                           // either order; or `if (... >= ... || ...) return;`
        out[IO] = F(in[II]);                          // one statement, exactly one read of `in`
    }

where ``in`` and ``out`` are distinct pointer parameters, ``in`` is never written, II is ``y * E + x`` (the
read is contiguous in x; either operand order) and IO is ``x * E' + y`` (the write is contiguous in y,
i.e. strided in the naive mapping), F is any expression of scalars the kernel never assigns, and nothing
else reads or writes memory, synchronizes or uses the thread coordinates.

The rewrite: a block owns a 32×32 tile of (y, x); with a 32×R thread block (R = 8 or 16) each thread loads
32/R elements ``in[II]`` at (y0 + r, x0 + threadIdx.x) into ``tile[r][threadIdx.x]``; after
``__syncthreads()`` each thread evaluates the original statement for (y, x) = (y0 + threadIdx.x, x0 + r)
with the read replaced by ``tile[threadIdx.x][r]``. Every (x, y) inside the original guard is written
exactly once with exactly the original expression; both phases are predicated by the original guard, so
partial tiles (any matrix size, including the perturbed odd ones) are handled, and the barrier is outside
every branch. Launch: block (32, R), grid (cdiv(NX, 32), cdiv(NY, 32)) with NX/NY the guard bounds in spec
terms (or the extents the original launch covered).
"""

from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.tree import node_text, walk
from . import register
from ._structural import (
    Grid2D,
    extents_2d,
    fresh_body,
    grid_2d,
    indent,
    is_ident,
    render,
    subscript_parts,
    unparen,
    written_names,
)
from ._structural_rule import Launch, StructuralRule, fitting
from .base import RuleContext

#: the prefix of every name this rewrite introduces (one per rule, so rules compose without clashes)
PREFIX = "wfx_"

#: param -> threads along y in a block (the tile is 32 x 32)
VARIANTS = {"b32x8": 8, "b32x16": 16}
_TILE = 32
_COORDS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})


@dataclass
class _Shape:
    g: Grid2D
    stmt: Node
    src: str
    dst: str
    read: Node
    elem: str


def _linear(idx: Node, data: bytes, fast: str, slow: str) -> bool:
    """``slow * E + fast`` / ``fast + slow * E`` / ``E * slow + fast`` ... with E free of both."""
    n = unparen(idx)
    if n.type != "binary_expression":
        return False
    op, left, right = (n.child_by_field_name(f) for f in ("operator", "left", "right"))
    if op is None or left is None or right is None or node_text(op, data) != "+":
        return False
    for term, other in ((left, right), (right, left)):
        if not is_ident(other, data, fast):
            continue
        t = unparen(term)
        if t.type != "binary_expression":
            continue
        top, a, b = (t.child_by_field_name(f) for f in ("operator", "left", "right"))
        if top is None or a is None or b is None or node_text(top, data) != "*":
            continue
        for s, e in ((a, b), (b, a)):
            if is_ident(s, data, slow):
                ids = {node_text(x, data) for x in walk(e) if x.type == "identifier"}
                if fast not in ids and slow not in ids:
                    return True
    return False


def _analyse(ctx: RuleContext) -> tuple[_Shape, bytes] | None:
    got = fresh_body(ctx, PREFIX)
    if got is None:
        return None
    k, body, data = got
    g = grid_2d(body, data)
    if g is None or len(g.inner) != 1:
        return None
    st = g.inner[0]
    if st.type != "expression_statement" or st.named_child_count != 1:
        return None
    e = st.named_children[0]
    if e.type != "assignment_expression":
        return None
    left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
    if left is None or op is None or right is None or node_text(op, data) != "=":
        return None
    lp = subscript_parts(left, data)
    if lp is None or not is_ident(lp[0], data):
        return None
    dst = node_text(unparen(lp[0]), data)
    reads = [n for n in walk(right) if n.type == "subscript_expression"]
    if len(reads) != 1:
        return None
    rp = subscript_parts(reads[0], data)
    if rp is None or not is_ident(rp[0], data):
        return None
    src = node_text(unparen(rp[0]), data)
    pointers = {p.name: p for p in k.params if p.is_pointer and p.pointer_depth == 1 and not p.array_dims}
    if src not in pointers or dst not in pointers or src == dst:
        return None
    x, y = g.x.name, g.y.name
    if not _linear(rp[1], data, x, y) or not _linear(lp[1], data, y, x):
        return None
    ids = {node_text(n, data) for n in walk(st) if n.type == "identifier"}
    if ids & _COORDS or (ids - {x, y}) & written_names(body, data):
        return None
    if any(n.type in ("pointer_expression", "update_expression", "assignment_expression", "comma_expression")
           and n.id != e.id for n in walk(st)):
        return None  # addresses, dereferences or side effects inside the statement
    return _Shape(g, st, src, dst, reads[0], pointers[src].type), data


class SmemTranspose(StructuralRule[_Shape]):
    family = "smem_transpose"
    structural = True
    motivated_by = ("WF103", "coalesce", "smem_transpose")

    def analyse(self, ctx: RuleContext) -> tuple[_Shape, bytes] | None:
        return _analyse(ctx)

    def launches(self, ctx: RuleContext, shape: _Shape, data: bytes) -> dict[str, Launch]:
        ext = extents_2d(ctx, shape.g, data)
        if ext is None:
            return {}
        nx, ny = ext
        return fitting(ctx, {param: Launch((f"cdiv({nx}, {_TILE})", f"cdiv({ny}, {_TILE})"), (str(_TILE), str(rows)))
                             for param, rows in VARIANTS.items()})

    def body(self, ctx: RuleContext, shape: _Shape, data: bytes, param: str) -> str:
        return _generate(shape, data, VARIANTS[param])

    def rationale(self, shape: _Shape, param: str) -> str:
        return (f"stage {_TILE}x{_TILE} tiles of {shape.src} in padded shared memory ({_TILE}x{_TILE + 1}) so that "
                f"the writes of {shape.dst} coalesce too (block {_TILE}x{VARIANTS[param]})")


def _generate(shape: _Shape, data: bytes, rows: int) -> str:
    g = shape.g
    x, y = g.x, g.y
    p = PREFIX
    read_txt = node_text(shape.read, data)
    tile_read = f"{p}tile[threadIdx.x][{p}r]"

    def rep(n: Node) -> str | None:
        return tile_read if n.id == shape.read.id else None

    write = render(shape.stmt, data, rep)
    code = f"""__shared__ {shape.elem} {p}tile[{_TILE}][{_TILE + 1}];
const int {p}x0 = blockIdx.x * {_TILE}, {p}y0 = blockIdx.y * {_TILE};
for (int {p}r = threadIdx.y; {p}r < {_TILE}; {p}r += {rows}) {{
    const {y.type} {y.name} = {p}y0 + {p}r;
    const {x.type} {x.name} = {p}x0 + threadIdx.x;
    if ({g.ok_cond}) {{
        {p}tile[{p}r][threadIdx.x] = {read_txt};
    }}
}}
__syncthreads();
for (int {p}r = threadIdx.y; {p}r < {_TILE}; {p}r += {rows}) {{
    const {y.type} {y.name} = {p}y0 + threadIdx.x;
    const {x.type} {x.name} = {p}x0 + {p}r;
    if ({g.ok_cond}) {{
        {write}
    }}
}}"""
    return "{\n" + indent(code, "    ") + "\n}"


register(SmemTranspose())
