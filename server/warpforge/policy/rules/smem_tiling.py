"""smem_tiling: shared-memory (and register) tiling of a matmul-like dot-product loop.

Why it helps: a kernel computing one output per thread as a K-long dot product straight from global
memory loads every input element once per output that uses it (N times for A, M times for B), so it is
bound by load bandwidth and latency, not arithmetic. Staging a BM×BK tile of A and a BK×BN tile of B in
shared memory lets a block reuse each loaded element BM (or BN) times; giving each thread a TM×TN block of
outputs in registers reuses each shared-memory value TM (or TN) times more, so the inner loop does TM·TN
fused multiply-adds per TM+TN shared loads.

Recognized shape (names, types, bound and index expressions free)::

    T x = blockIdx.x * blockDim.x + threadIdx.x;      // the two index declarations, either order
    T y = blockIdx.y * blockDim.y + threadIdx.y;
    if (y < NY && x < NX) {                           // either order; or `if (x >= NX || y >= NY) return;`
        ACC acc = <literal>;
        for (int k = 0; k < KB; ++k) {                // k++, ++k, k += 1
            acc += P[IP] * Q[IQ];                     // either operand order
        }
        EPILOGUE                                      // any statements using acc, x, y (e.g. the alpha/beta update)
    }

where IP uses y and k but not x, IQ uses x and k but not y (or the other way round: the operand that uses
y is staged as the "A" tile), every other name in them is never assigned in the kernel, P and Q are
pointer parameters the kernel never writes, the epilogue does not leave early, synchronize, use the thread
coordinates or assign x/y, and the block and grid are 2D.

The rewrite: a block computes a BM×BN tile of outputs; for each BK-slice of k it loads the A tile
(``P[IP]`` at y = block row + r, k = k0 + c) and the B tile (``Q[IQ]``) cooperatively into shared memory,
each load predicated by the original bounds (zeros outside: adding 0·0 leaves a sum unchanged), then every
thread accumulates its TM×TN outputs; ``__syncthreads`` after the loads (tiles complete before use) and
after the compute (no thread overwrites a tile another still reads). The summation order over k is the
original one, so the dot products are bitwise identical. Finally each output that exists (the original
guard) runs the original EPILOGUE with ``x``, ``y`` and ``acc`` bound to its values — alpha/beta semantics
are kept exactly. Any M, N, K work: partial tiles are predicated, and the grid is ``(cdiv(NX, BN),
cdiv(NY, BM))`` with NX, NY the guard bounds in spec terms (or the extent the original launch covered).

Variants: ``t16``/``t32`` (TILE×TILE blocks, one output per thread), ``t32r4`` (32×32 tile, 4 outputs per
thread along y, block 32×8), ``t64r4x4`` and ``t128r8x8`` (4×4 and 8×8 outputs per thread, 256 threads).
Thread (tx, ty) owns outputs y = ty + i·(BM/TM), x = tx + j·(BN/TN): consecutive threads take consecutive
columns, so tile reads are conflict-free and epilogue stores coalesce.
"""

from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.tree import node_text, walk
from . import register
from ._structural import (
    Decl,
    Grid2D,
    binary_parts,
    bound_text,
    declared_names,
    extents_2d,
    flush,
    for_parts,
    fresh_body,
    grid_2d,
    has_jump,
    indent,
    is_ident,
    single_decl,
    sole_assignment,
    subscript_parts,
    unparen,
    upper_bound,
    written_names,
)
from ._structural_rule import Launch, StructuralRule, fitting
from .base import RuleContext

#: the prefix of every name this rewrite introduces (one per rule, so rules compose without clashes)
PREFIX = "wft_"

#: param -> (BM, BN, BK, TM, TN)
#: most promising first: a search that can afford one variant of a family tries the register-tiled 64×64
#: tile (4×4 outputs per thread), the usual sweet spot for mid-size matrices; 128×128 suits large ones
VARIANTS: dict[str, tuple[int, int, int, int, int]] = {
    "t64r4x4": (64, 64, 16, 4, 4),
    "t32r4": (32, 32, 32, 4, 1),
    "t128r8x8": (128, 128, 8, 8, 8),
    "t32": (32, 32, 32, 1, 1),
    "t16": (16, 16, 16, 1, 1),
}
_COORDS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})
_ELEM = frozenset({"float", "double", "int", "unsigned", "unsigned int"})


@dataclass
class _Operand:
    array: str
    elem: str
    index: Node
    node: Node


@dataclass
class _Shape:
    g: Grid2D
    acc: Decl
    k: Decl
    k_cond: Node
    a: _Operand  # uses y and k
    b: _Operand  # uses x and k
    a_first: bool  # the product is written a * b (else b * a)
    epilogue: list[Node]


def _ids(node: Node, data: bytes) -> set[str]:
    return {node_text(n, data) for n in walk(node) if n.type == "identifier"}


def _operand(node: Node, data: bytes, pointers: dict[str, str]) -> _Operand | None:
    parts = subscript_parts(node, data)
    if parts is None or not is_ident(parts[0], data):
        return None
    name = node_text(unparen(parts[0]), data)
    if name not in pointers:
        return None
    return _Operand(name, pointers[name], parts[1], unparen(node))


def _analyse(ctx: RuleContext) -> tuple[_Shape, bytes] | None:
    got = fresh_body(ctx, PREFIX)
    if got is None:
        return None
    k, body, data = got
    g = grid_2d(body, data)
    if g is None or len(g.inner) < 3:
        return None
    acc = single_decl(g.inner[0], data)
    loop = g.inner[1]
    fp = for_parts(loop, data)
    if acc is None or acc.pointer or acc.value is None or unparen(acc.value).type != "number_literal" or fp is None:
        return None
    kd, cond, upd, lbody = fp.var, fp.cond, fp.update, fp.body
    if kd.value is None or node_text(unparen(kd.value), data) != "0":
        return None
    kv = kd.name
    kb = upper_bound(cond, data, kv)
    if kb is None or node_text(unparen(upd), data).replace(" ", "") not in (f"{kv}++", f"++{kv}", f"{kv}+=1"):
        return None
    step = sole_assignment(lbody, data)
    if step is None or not is_ident(step[0], data, acc.name) or step[1] != "+=":
        return None
    prod = binary_parts(step[2], data)
    if prod is None or prod[1] != "*":
        return None
    p1, _, p2 = prod
    pointers = {p.name: p.type for p in k.params if p.is_pointer and p.pointer_depth == 1 and not p.array_dims}
    o1, o2 = _operand(p1, data, pointers), _operand(p2, data, pointers)
    if o1 is None or o2 is None or o1.elem not in _ELEM or o2.elem not in _ELEM:
        return None
    x, y = g.x.name, g.y.name
    written = written_names(body, data)
    for n in walk(body):  # P and Q must be read-only
        if n.type == "assignment_expression":
            lhs = n.child_by_field_name("left")
            parts = subscript_parts(lhs, data) if lhs is not None else None
            if parts is not None and node_text(unparen(parts[0]), data) in (o1.array, o2.array):
                return None
    for o in (o1, o2):
        ids = _ids(o.index, data)
        if kv not in ids or (ids - {x, y, kv}) & (written | _COORDS) or any(
                n.type in ("subscript_expression", "call_expression", "assignment_expression", "update_expression")
                for n in walk(o.index)):
            return None
    i1, i2 = _ids(o1.index, data), _ids(o2.index, data)

    def uses(ids: set[str], want: str, avoid: str) -> bool:
        return want in ids and avoid not in ids

    if uses(i1, y, x) and uses(i2, x, y):
        a, b, a_first = o1, o2, True
    elif uses(i2, y, x) and uses(i1, x, y):
        a, b, a_first = o2, o1, False
    else:
        return None
    epilogue = g.inner[2:]
    kbound_ids = _ids(kb.limit, data) | _ids(g.x_bound.limit, data) | _ids(g.y_bound.limit, data)
    if kbound_ids & (written | _COORDS):
        return None
    for st in epilogue:
        if has_jump(st, loops_ok=True) or _ids(st, data) & _COORDS or written_names(st, data) & {x, y}:
            return None
        if acc.name in declared_names(st, data) or {x, y} & declared_names(st, data):
            return None
    return _Shape(g, acc, kd, cond, a, b, a_first, epilogue), data


class SmemTiling(StructuralRule[_Shape]):
    family = "smem_tiling"
    structural = True
    motivated_by = ("smem_tiling", "data_reuse")

    def analyse(self, ctx: RuleContext) -> tuple[_Shape, bytes] | None:
        return _analyse(ctx)

    def launches(self, ctx: RuleContext, shape: _Shape, data: bytes) -> dict[str, Launch]:
        ext = extents_2d(ctx, shape.g, data)
        if ext is None:
            return {}
        nx, ny = ext
        return fitting(ctx, {param: Launch((f"cdiv({nx}, {bn})", f"cdiv({ny}, {bm})"), (str(bn // tn), str(bm // tm)))
                             for param, (bm, bn, _bk, tm, tn) in VARIANTS.items()})

    def body(self, ctx: RuleContext, shape: _Shape, data: bytes, param: str) -> str:
        return _generate(shape, data, *VARIANTS[param])

    def rationale(self, shape: _Shape, param: str) -> str:
        bm, bn, bk, tm, tn = VARIANTS[param]
        per = f", {tm}x{tn} outputs per thread in registers" if tm * tn > 1 else ""
        return (f"stage {bm}x{bk} tiles of {shape.a.array} and {bk}x{bn} tiles of {shape.b.array} in shared "
                f"memory ({bm}x{bn} outputs per block{per})")


def _generate(shape: _Shape, data: bytes, bm: int, bn: int, bk: int, tm: int, tn: int) -> str:
    g = shape.g
    x, y, kv = g.x, g.y, shape.k
    p = PREFIX
    a, b = shape.a, shape.b
    acc = shape.acc
    at, bt = a.elem, b.elem
    init = node_text(acc.value, data) if acc.value is not None else "0"
    k_ok = node_text(shape.k_cond, data)
    y_ok = bound_text(y.name, g.y_bound, data)
    x_ok = bound_text(x.name, g.x_bound, data)
    ka = node_text(a.node, data)
    kbt = node_text(b.node, data)
    prod = f"{p}a[{p}i] * {p}b[{p}j]" if shape.a_first else f"{p}b[{p}j] * {p}a[{p}i]"
    epi = "\n".join(flush(node_text(n, data), n, data) for n in shape.epilogue)
    acc_q = "const " if acc.const else ""
    kb = upper_bound(shape.k_cond, data, kv.name)
    assert kb is not None
    k_end = f"({node_text(kb.limit, data)}) + 1" if kb.inclusive else f"({node_text(kb.limit, data)})"
    code = f"""constexpr int {p}BM = {bm}, {p}BN = {bn}, {p}BK = {bk}, {p}TM = {tm}, {p}TN = {tn};
constexpr int {p}TX = {p}BN / {p}TN, {p}TY = {p}BM / {p}TM, {p}NT = {p}TX * {p}TY;
__shared__ {at} {p}As[{p}BM][{p}BK];
__shared__ {bt} {p}Bs[{p}BK][{p}BN];
const int {p}tx = threadIdx.x, {p}ty = threadIdx.y;
const int {p}tid = {p}ty * {p}TX + {p}tx;
const int {p}y0 = blockIdx.y * {p}BM, {p}x0 = blockIdx.x * {p}BN;
{acc.type} {p}acc[{p}TM][{p}TN];
#pragma unroll
for (int {p}i = 0; {p}i < {p}TM; ++{p}i) {{
    #pragma unroll
    for (int {p}j = 0; {p}j < {p}TN; ++{p}j) {{
        {p}acc[{p}i][{p}j] = {init};
    }}
}}
static_assert(({p}BM * {p}BK) % {p}NT == 0 && ({p}BK * {p}BN) % {p}NT == 0, "whole tiles per thread");
for ({kv.type} {p}k0 = 0; {p}k0 < {k_end}; {p}k0 += {p}BK) {{
    #pragma unroll
    for (int {p}l = 0; {p}l < {p}BM * {p}BK / {p}NT; ++{p}l) {{
        const int {p}e = {p}tid + {p}l * {p}NT;
        const {y.type} {y.name} = {p}y0 + {p}e / {p}BK;
        const {kv.type} {kv.name} = {p}k0 + {p}e % {p}BK;
        {p}As[{p}e / {p}BK][{p}e % {p}BK] = ({y_ok} && {k_ok}) ? {ka} : static_cast<{at}>(0);
    }}
    #pragma unroll
    for (int {p}l = 0; {p}l < {p}BK * {p}BN / {p}NT; ++{p}l) {{
        const int {p}e = {p}tid + {p}l * {p}NT;
        const {kv.type} {kv.name} = {p}k0 + {p}e / {p}BN;
        const {x.type} {x.name} = {p}x0 + {p}e % {p}BN;
        {p}Bs[{p}e / {p}BN][{p}e % {p}BN] = ({k_ok} && {x_ok}) ? {kbt} : static_cast<{bt}>(0);
    }}
    __syncthreads();
    #pragma unroll
    for (int {p}kk = 0; {p}kk < {p}BK; ++{p}kk) {{
        {at} {p}a[{p}TM];
        {bt} {p}b[{p}TN];
        #pragma unroll
        for (int {p}i = 0; {p}i < {p}TM; ++{p}i) {{
            {p}a[{p}i] = {p}As[{p}ty + {p}i * {p}TY][{p}kk];
        }}
        #pragma unroll
        for (int {p}j = 0; {p}j < {p}TN; ++{p}j) {{
            {p}b[{p}j] = {p}Bs[{p}kk][{p}tx + {p}j * {p}TX];
        }}
        #pragma unroll
        for (int {p}i = 0; {p}i < {p}TM; ++{p}i) {{
            #pragma unroll
            for (int {p}j = 0; {p}j < {p}TN; ++{p}j) {{
                {p}acc[{p}i][{p}j] += {prod};
            }}
        }}
    }}
    __syncthreads();
}}
#pragma unroll
for (int {p}i = 0; {p}i < {p}TM; ++{p}i) {{
    #pragma unroll
    for (int {p}j = 0; {p}j < {p}TN; ++{p}j) {{
        const {y.type} {y.name} = {p}y0 + {p}ty + {p}i * {p}TY;
        const {x.type} {x.name} = {p}x0 + {p}tx + {p}j * {p}TX;
        if ({g.ok_cond}) {{
            {acc_q}{acc.type} {acc.name} = {p}acc[{p}i][{p}j];
{indent(epi, "            ")}
        }}
    }}
}}"""
    return "{\n" + indent(code, "    ") + "\n}"


register(SmemTiling())
